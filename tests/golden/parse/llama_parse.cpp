// llama_parse.cpp — oracle for tests/golden/parse: parse one recorded model
// output with llama.cpp's own chat parser (common_chat_templates_apply +
// common_chat_parse), set up from a real chat template, and print the
// message as JSON. Built and run by make_goldens.py against the llama.cpp
// tree in /opt/llama (read-only); not part of ember's build.
// Usage: llama_parse TEMPLATE.jinja OUTPUT.txt TOOLS.json ENABLE_THINKING(0|1)
#include <fstream>
#include <iostream>
#include <sstream>

#include <nlohmann/json.hpp>

#include "chat.h"

using json = nlohmann::ordered_json;

static std::string slurp(const char *p)
{
    std::ifstream f(p, std::ios::binary);
    std::stringstream ss;
    ss << f.rdbuf();
    return ss.str();
}

int main(int argc, char **argv)
{
    if (argc < 5) return 2;
    auto tmpls = common_chat_templates_init(nullptr, slurp(argv[1]), "<s>", "</s>");
    common_chat_templates_inputs in;
    common_chat_msg user;
    user.role = "user";
    user.content = "What is the weather?";
    in.messages.push_back(user);
    for (auto &t : json::parse(slurp(argv[3]))) {
        common_chat_tool tool;
        tool.name = t["function"]["name"];
        tool.description = t["function"].value("description", "");
        tool.parameters = t["function"]["parameters"].dump();
        in.tools.push_back(tool);
    }
    in.parallel_tool_calls = true;
    in.enable_thinking = std::string(argv[4]) == "1";
    in.reasoning_format = COMMON_REASONING_FORMAT_DEEPSEEK;
    auto params = common_chat_templates_apply(tmpls.get(), in);
    common_chat_parser_params pp(params);
    pp.reasoning_format = COMMON_REASONING_FORMAT_DEEPSEEK;
    if (!params.parser.empty()) pp.parser.load(params.parser);
    json out;
    out["format"] = common_chat_format_name(params.format);
    try {
        auto msg = common_chat_parse(slurp(argv[2]), false, pp);
        out["content"] = msg.content;
        out["reasoning_content"] = msg.reasoning_content;
        out["tool_calls"] = json::array();
        for (auto &tc : msg.tool_calls) {
            json args;
            try { args = json::parse(tc.arguments); } catch (...) { args = tc.arguments; }
            out["tool_calls"].push_back({{"name", tc.name}, {"arguments", args}});
        }
    } catch (const std::exception &e) {
        out["error"] = e.what();
    }
    std::cout << out.dump() << "\n";
    return 0;
}
