#!/usr/bin/env python3
"""Writes the tool-output fixtures: <format>/<name>.txt (a model's raw output,
exact bytes) and <format>/<name>.json (parser settings and the expected
message). Both sides are written here BY HAND from the formats' public
descriptions — the chat templates in tests/data/templates/ (which render an
assistant's tool calls in the very syntax the model is trained to emit) and
the model cards named in each "source" — never from ember's output.
Run: python3 tests/data/tool_outputs/make_fixtures.py
"""
import json, os

HERE = os.path.dirname(os.path.abspath(__file__))
W = {"type": "function", "function": {"name": "get_weather", "parameters": {"type": "object",
     "properties": {"city": {"type": "string"}, "days": {"type": "integer"}}, "required": ["city"]}}}

def fx(fmt, name, text, expected, tool_format=None, reasoning="none", open_at_start=False, tools=None, source="",
       streamed=None):
    d = os.path.join(HERE, fmt)
    os.makedirs(d, exist_ok=True)
    with open(os.path.join(d, name + ".txt"), "wb") as f:
        f.write(text.encode("utf-8"))
    exp = {"content": expected.get("content", ""), "reasoning_content": expected.get("reasoning_content", ""),
           "tool_calls": expected.get("tool_calls", [])}
    j = {"source": source, "tool_format": tool_format or fmt, "reasoning": reasoning,
         "reasoning_open_at_start": open_at_start, "expected": exp}
    if tools is not None:
        j["tools"] = tools
    if streamed is not None:
        # with stream_arguments a call whose name and "{" were seen is closed, not turned into content
        j["expected_stream_arguments"] = {"content": streamed.get("content", ""),
                                          "reasoning_content": streamed.get("reasoning_content", ""),
                                          "tool_calls": streamed.get("tool_calls", [])}
    with open(os.path.join(d, name + ".json"), "w") as f:
        json.dump(j, f, indent=1, ensure_ascii=False)
        f.write("\n")

def call(name, args):
    return {"name": name, "arguments": args}

# ---------------------------------------------------------------- hermes
HS = "Hermes 2 Pro / Qwen 2.5 / Qwen 3 templates: '<tool_call>\\n{\"name\": <function-name>, \"arguments\": <args-json-object>}\\n</tool_call>'"
fx("hermes", "single", '<tool_call>\n{"name": "get_current_weather", "arguments": {"location": "Boston, MA", "unit": "fahrenheit"}}\n</tool_call>',
   {"tool_calls": [call("get_current_weather", {"location": "Boston, MA", "unit": "fahrenheit"})]}, source=HS)
fx("hermes", "content_then_call", 'I will look that up for you.\n<tool_call>\n{"name": "get_weather", "arguments": {"city": "Paris", "days": 3}}\n</tool_call>',
   {"content": "I will look that up for you.", "tool_calls": [call("get_weather", {"city": "Paris", "days": 3})]}, source=HS)
fx("hermes", "parallel", '<tool_call>\n{"name": "get_weather", "arguments": {"city": "Paris"}}\n</tool_call>\n<tool_call>\n{"name": "get_weather", "arguments": {"city": "Tokyo"}}\n</tool_call>\n<tool_call>\n{"name": "get_time", "arguments": {}}\n</tool_call>',
   {"tool_calls": [call("get_weather", {"city": "Paris"}), call("get_weather", {"city": "Tokyo"}), call("get_time", {})]}, source=HS)
fx("hermes", "qwen3_thinking", '<think>\nThe user wants the weather in Paris. I should call get_weather.\n</think>\n\n<tool_call>\n{"name": "get_weather", "arguments": {"city": "Paris"}}\n</tool_call>',
   {"reasoning_content": "The user wants the weather in Paris. I should call get_weather.", "tool_calls": [call("get_weather", {"city": "Paris"})]},
   reasoning="think", source="Qwen3 template (Qwen-Qwen3-0.6B.jinja): <think>..</think> then Hermes calls")
fx("hermes", "string_arguments", '<tool_call>\n{"name": "search", "arguments": "{\\"query\\": \\"llama.cpp issue 22722\\", \\"limit\\": 5}"}\n</tool_call>',
   {"tool_calls": [call("search", {"query": "llama.cpp issue 22722", "limit": 5})]},
   source="Qwen 2.5 template renders arguments that are a string as-is (tool_call.arguments is string), so a double-encoded object occurs")
fx("hermes", "unicode", 'Voilà — je vérifie 🌦️\n<tool_call>\n{"name": "get_weather", "arguments": {"city": "Zürich", "note": "東京も"}}\n</tool_call>',
   {"content": "Voilà — je vérifie 🌦️", "tool_calls": [call("get_weather", {"city": "Zürich", "note": "東京も"})]}, source=HS)
fx("hermes", "tag_inside_string", '<tool_call>\n{"name": "write_file", "arguments": {"path": "a.txt", "text": "literal </tool_call> and {braces]"}}\n</tool_call>',
   {"tool_calls": [call("write_file", {"path": "a.txt", "text": "literal </tool_call> and {braces]"})]}, source=HS)
fx("hermes", "pretty_printed", '<tool_call>\n{\n  "name": "get_weather",\n  "arguments": {\n    "city": "Oslo",\n    "days": 2\n  }\n}\n</tool_call>',
   {"tool_calls": [call("get_weather", {"city": "Oslo", "days": 2})]}, source=HS)
fx("hermes", "plain_answer", 'Hello! How can I help you today?',
   {"content": "Hello! How can I help you today?"}, source=HS)
fx("hermes", "malformed_bad_json", 'Calling.\n<tool_call>\n{"name": "get_weather", "arguments": {"city": }}\n</tool_call>\nDone.',
   {"content": 'Calling.\n<tool_call>\n{"name": "get_weather", "arguments": {"city": }}\n</tool_call>\nDone.'}, source="malformed on purpose: bad JSON degrades to content", streamed={"content": "Calling.\nDone.", "tool_calls": [call("get_weather", {})]})
fx("hermes", "malformed_unterminated", 'Sure.\n<tool_call>\n{"name": "get_weather", "arguments": {"city": "Par',
   {"content": 'Sure.\n<tool_call>\n{"name": "get_weather", "arguments": {"city": "Par'}, source="malformed on purpose: output ends inside the call", streamed={"content": "Sure.", "tool_calls": [call("get_weather", {"city": "Par"})]})
fx("hermes", "malformed_no_name", '<tool_call>\n{"arguments": {"city": "Paris"}}\n</tool_call>',
   {"content": '<tool_call>\n{"arguments": {"city": "Paris"}}\n</tool_call>'}, source="malformed on purpose: no name")

# ---------------------------------------------------------- qwen3_coder
QS = "Qwen3-Coder.jinja: '<tool_call>\\n<function=' + name + '>\\n' then '<parameter=' + key + '>\\n' + value + '\\n</parameter>\\n', '</function>\\n</tool_call>'"
fx("qwen3_coder", "single", '<tool_call>\n<function=get_weather>\n<parameter=city>\nParis\n</parameter>\n<parameter=days>\n3\n</parameter>\n</function>\n</tool_call>',
   {"tool_calls": [call("get_weather", {"city": "Paris", "days": 3})]}, tools=[W], source=QS)
fx("qwen3_coder", "string_typed", '<tool_call>\n<function=get_weather>\n<parameter=city>\n1984\n</parameter>\n</function>\n</tool_call>',
   {"tool_calls": [call("get_weather", {"city": "1984"})]}, tools=[W], source=QS + "; a parameter typed string in the tool schema stays a string")
fx("qwen3_coder", "untyped_json_values", '<tool_call>\n<function=configure>\n<parameter=verbose>\ntrue\n</parameter>\n<parameter=ratio>\n0.25\n</parameter>\n<parameter=tags>\n["a", "b"]\n</parameter>\n<parameter=label>\nhello world\n</parameter>\n</function>\n</tool_call>',
   {"tool_calls": [call("configure", {"verbose": True, "ratio": 0.25, "tags": ["a", "b"], "label": "hello world"})]},
   source=QS + "; non-string values are written with tojson, so without a schema JSON-looking values are JSON")
fx("qwen3_coder", "multiline_code", 'I will create the file.\n\n<tool_call>\n<function=write_file>\n<parameter=path>\nsrc/main.py\n</parameter>\n<parameter=content>\ndef main():\n    print("hi <there>")\n\nmain()\n</parameter>\n</function>\n</tool_call>',
   {"content": "I will create the file.", "tool_calls": [call("write_file", {"path": "src/main.py", "content": 'def main():\n    print("hi <there>")\n\nmain()'})]}, source=QS)
fx("qwen3_coder", "parallel", '<tool_call>\n<function=get_weather>\n<parameter=city>\nParis\n</parameter>\n</function>\n</tool_call>\n<tool_call>\n<function=get_weather>\n<parameter=city>\nRome\n</parameter>\n</function>\n</tool_call>',
   {"tool_calls": [call("get_weather", {"city": "Paris"}), call("get_weather", {"city": "Rome"})]}, tools=[W], source=QS)
fx("qwen3_coder", "qwen35_thinking_open", 'The user asks for Rome weather.\n</think>\n\n<tool_call>\n<function=get_weather>\n<parameter=city>\nRome\n</parameter>\n</function>\n</tool_call>',
   {"reasoning_content": "The user asks for Rome weather.", "tool_calls": [call("get_weather", {"city": "Rome"})]},
   tools=[W], reasoning="think", open_at_start=True, source="Qwen3.5-4B.jinja ends the generation prompt with '<think>\\n' when thinking; calls as Qwen3-Coder")
fx("qwen3_coder", "no_params", '<tool_call>\n<function=get_time>\n</function>\n</tool_call>',
   {"tool_calls": [call("get_time", {})]}, source=QS)
fx("qwen3_coder", "malformed_missing_close", '<tool_call>\n<function=get_weather>\n<parameter=city>\nParis\n</function>\n</tool_call>',
   {"content": '<tool_call>\n<function=get_weather>\n<parameter=city>\nParis\n</function>\n</tool_call>'}, tools=[W], source="malformed on purpose: </parameter> missing", streamed={"tool_calls": [call("get_weather", {"city": "Paris\n</function>"})]})
fx("qwen3_coder", "malformed_unterminated", 'Ok.\n<tool_call>\n<function=get_weather>\n<parameter=city>\nPar',
   {"content": 'Ok.\n<tool_call>\n<function=get_weather>\n<parameter=city>\nPar'}, tools=[W], source="malformed on purpose: output ends inside the call", streamed={"content": "Ok.", "tool_calls": [call("get_weather", {"city": "Par"})]})

# Qwen3.5 (Qwen3.5-4B.jinja: the Qwen3-Coder call syntax; the generation
# prompt ends '<think>\n' when thinking, '<think>\n\n</think>\n\n' when not).
# Outputs and expected messages are llama.cpp's own test cases for this
# template (tests/test-chat.cpp, "Qwen3.5" block, llama-cpp-python 0.3.36),
# recorded here as facts: the tools are the ones those rows declare.
def tool(name, props, required):
    return {"type": "function", "function": {"name": name, "parameters": {"type": "object", "properties": props,
                                                                         "required": required}}}
SPECIAL = tool("special_function", {"arg1": {"type": "integer"}}, ["arg1"])
SPECIAL_OPT = tool("special_function_with_opt", {"arg1": {"type": "integer"}, "arg2": {"type": "integer"}}, ["arg1"])
PYTHON = tool("python", {"code": {"type": "string"}}, ["code"])
EDIT = tool("edit", {"filename": {"type": "string"}, "oldString": {"type": "string"}, "newString": {"type": "string"}},
            ["filename", "oldString", "newString"])
RUN = tool("run_in_terminal", {"command": {"type": "string"}}, ["command"])
L35 = "llama.cpp tests/test-chat.cpp, Qwen3.5-4B.jinja rows: "
PWD = '<tool_call>\n<function=run_in_terminal>\n<parameter=command>\npwd\n</parameter>\n</function>\n</tool_call>'
fx("qwen3_coder", "qwen35_thoughts_answer", "I'm\nthinking\n</think>\n\nHello, world!\nWhat's up?",
   {"reasoning_content": "I'm\nthinking", "content": "Hello, world!\nWhat's up?"}, tools=[SPECIAL], reasoning="think",
   open_at_start=True, source=L35 + "enable_thinking, reasoning_format auto -> message_assist_thoughts")
fx("qwen3_coder", "qwen35_thoughts_then_call", "I'm\nthinking\n</think>\n\n<tool_call>\n<function=special_function>\n<parameter=arg1>\n1\n</parameter>\n</function>\n</tool_call>",
   {"reasoning_content": "I'm\nthinking", "tool_calls": [call("special_function", {"arg1": 1})]}, tools=[SPECIAL],
   reasoning="think", open_at_start=True, source=L35 + "message_assist_call_thoughts (arg1 typed integer)")
fx("qwen3_coder", "qwen35_parallel_thinking_off", '<tool_call>\n<function=special_function>\n<parameter=arg1>\n1\n</parameter>\n</function>\n</tool_call>\n<tool_call>\n<function=special_function_with_opt>\n<parameter=arg1>\n1\n</parameter>\n<parameter=arg2>\n2\n</parameter>\n</function>\n</tool_call>',
   {"tool_calls": [call("special_function", {"arg1": 1}), call("special_function_with_opt", {"arg1": 1, "arg2": 2})]},
   tools=[SPECIAL, SPECIAL_OPT], reasoning="think", source=L35 + "enable_thinking false, parallel_tool_calls")
fx("qwen3_coder", "qwen35_code_value", '<tool_call>\n<function=python>\n<parameter=code>\ndef hello():\n    print("Hello, world!")\n\nhello()\n</parameter>\n</function>\n</tool_call>',
   {"tool_calls": [call("python", {"code": 'def hello():\n    print("Hello, world!")\n\nhello()'})]}, tools=[PYTHON],
   reasoning="think", source=L35 + "python_tool, multi-line code")
fx("qwen3_coder", "qwen35_code_indent", '<tool_call>\n<function=python>\n<parameter=code>\n    print("Hello, world!")\n</parameter>\n</function>\n</tool_call>',
   {"tool_calls": [call("python", {"code": '    print("Hello, world!")'})]}, tools=[PYTHON],
   reasoning="think", source=L35 + "code that starts with an indent keeps it")
fx("qwen3_coder", "qwen35_value_trailing_newline", '<tool_call>\n<function=edit>\n<parameter=filename>\nfoo.c\n</parameter>\n<parameter=oldString>\n#iclunde\n</parameter>\n<parameter=newString>\n#include\n\n</parameter>\n</function>\n</tool_call>',
   {"tool_calls": [call("edit", {"filename": "foo.c", "oldString": "#iclunde", "newString": "#include\n"})]}, tools=[EDIT],
   reasoning="think", source=L35 + "a value ending in a newline keeps it (the delimiter is '\\n</parameter>\\n')")
fx("qwen3_coder", "qwen35_call_ends_thought", PWD,
   {"tool_calls": [call("run_in_terminal", {"command": "pwd"})]}, tools=[RUN], reasoning="think", open_at_start=True,
   source=L35 + "a tool call ends the prefilled thinking block without a closing </think>")
fx("qwen3_coder", "qwen35_thought_then_call_no_close", "Need to inspect the current directory.\n" + PWD,
   {"reasoning_content": "Need to inspect the current directory.", "tool_calls": [call("run_in_terminal", {"command": "pwd"})]},
   tools=[RUN], reasoning="think", open_at_start=True, source=L35 + "...including after the model has thought about it")
fx("qwen3_coder", "qwen35_close_then_call", "</think>\n\n" + PWD,
   {"tool_calls": [call("run_in_terminal", {"command": "pwd"})]}, tools=[RUN], reasoning="think", open_at_start=True,
   source=L35 + "'</think>' then the call: reasoning empty")
fx("qwen3_coder", "qwen35_close_content_call", "</think>\n\nLet me inspect the current directory.\n" + PWD,
   {"content": "Let me inspect the current directory.", "tool_calls": [call("run_in_terminal", {"command": "pwd"})]},
   tools=[RUN], reasoning="think", open_at_start=True, source=L35 + "content between the thought and the call")
TODO = tool("set_todos", {"todos": {"type": "array"}, "dry_run": {"type": "boolean"}, "verbose": {"type": "boolean"},
                          "note": {"type": "null"}, "label": {"type": "string"}}, ["todos"])
fx("qwen3_coder", "qwen35_python_literals", '<tool_call>\n<function=set_todos>\n<parameter=todos>\n[{"title": "buy milk", "done": false}]\n</parameter>\n<parameter=dry_run>\nTrue\n</parameter>\n<parameter=verbose>\nFalse\n</parameter>\n<parameter=note>\nNone\n</parameter>\n<parameter=label>\nTrue\n</parameter>\n</function>\n</tool_call>',
   {"tool_calls": [call("set_todos", {"todos": [{"title": "buy milk", "done": False}], "dry_run": True, "verbose": False, "note": None, "label": "True"})]},
   tools=[TODO], reasoning="think",
   source="Qwen3.5-4B.jinja writes scalar arguments with '| string': jinja2 renders True/False/None "
          "(tests/golden/jinja/expected.json, q35_call_typed_args); typed boolean/null they are JSON, typed string they stay text")

# ---------------------------------------------------------------- gemma4
GS = "google-gemma-4-31B-it.jinja: '<|tool_call>call:' + name + '{' + key:format_argument(value) ... + '}<tool_call|>'; strings in <|\"|>, keys bare, dictsort order"
Q = '<|"|>'
fx("gemma4", "single", f'<|tool_call>call:get_weather{{city:{Q}London{Q},days:3}}<tool_call|>',
   {"tool_calls": [call("get_weather", {"city": "London", "days": 3})]}, source=GS)
fx("gemma4", "parallel", f'<|tool_call>call:get_weather{{city:{Q}Paris{Q}}}<tool_call|><|tool_call>call:get_weather{{city:{Q}Tokyo{Q}}}<tool_call|><|tool_call>call:get_time{{}}<tool_call|>',
   {"tool_calls": [call("get_weather", {"city": "Paris"}), call("get_weather", {"city": "Tokyo"}), call("get_time", {})]}, source=GS + "; several calls back to back")
fx("gemma4", "nested", f'<|tool_call>call:create_event{{all_day:false,attendees:[{Q}a@x.com{Q},{Q}b@y.org{Q}],details:{{floor:2,room:{Q}4B{Q}}},duration:-1.5e1,note:null,title:{Q}Sync{Q}}}<tool_call|>',
   {"tool_calls": [call("create_event", {"all_day": False, "attendees": ["a@x.com", "b@y.org"], "details": {"floor": 2, "room": "4B"}, "duration": -15.0, "note": None, "title": "Sync"})]},
   source=GS + "; format_argument: mapping -> {k:v}, sequence -> [..], boolean -> true/false")
fx("gemma4", "escapes", f'<|tool_call>call:send_message{{text:{Q}He said "hi"\\n and {{left}}: a\\b, c\nnext line{Q},to:{Q}Zoë 🙂{Q}}}<tool_call|>',
   {"tool_calls": [call("send_message", {"text": 'He said "hi"\\n and {left}: a\\b, c\nnext line', "to": "Zoë 🙂"})]}, source=GS + "; <|\"|> strings are raw text")
fx("gemma4", "thinking_call", f'<|channel>thought\nThe user wants Paris weather; call the tool.<channel|><|tool_call>call:get_weather{{city:{Q}Paris{Q}}}<tool_call|>',
   {"reasoning_content": "The user wants Paris weather; call the tool.", "tool_calls": [call("get_weather", {"city": "Paris"})]},
   reasoning="gemma4", source=GS + "; thoughts as '<|channel>thought\\n' + text + '\\n<channel|>'")
fx("gemma4", "thinking_answer", '<|channel>thought\n2 + 2 is 4.\n<channel|>The answer is 4.',
   {"reasoning_content": "2 + 2 is 4.", "content": "The answer is 4."}, tool_format="gemma4", reasoning="gemma4", source=GS)
fx("gemma4", "content_then_call", f'Let me check that.<|tool_call>call:get_weather{{city:{Q}Lima{Q}}}<tool_call|>',
   {"content": "Let me check that.", "tool_calls": [call("get_weather", {"city": "Lima"})]}, source=GS)
fx("gemma4", "quoted_keys", f'<|tool_call>call:lookup{{query:{{{Q}first name{Q}:{Q}Ada{Q}}},limit:10}}<tool_call|>',
   {"tool_calls": [call("lookup", {"query": {"first name": "Ada"}, "limit": 10})]}, source=GS + "; format_argument(escape_keys=True) quotes nested keys with <|\"|>")
fx("gemma4", "malformed_unterminated_string", f'Checking.<|tool_call>call:get_weather{{city:{Q}London}}<tool_call|>',
   {"content": f'Checking.<|tool_call>call:get_weather{{city:{Q}London}}<tool_call|>'}, source="malformed on purpose: string never closed", streamed={"content": "Checking.", "tool_calls": [call("get_weather", {"city": "London}<tool_call|>"})]})
fx("gemma4", "malformed_syntax", f'<|tool_call>call:get_weather{{city:{Q}Rome{Q} days:2}}<tool_call|> ok',
   {"content": f'<|tool_call>call:get_weather{{city:{Q}Rome{Q} days:2}}<tool_call|> ok'}, source="malformed on purpose: missing comma", streamed={"content": "ok", "tool_calls": [call("get_weather", {"city": "Rome"})]})

# ---------------------------------------------------------------- llama3
LS = "Llama 3.1 model card, JSON based tool calling: {\"name\": function name, \"parameters\": dictionary of argument name and its value}; templates meta-llama-Llama-3.*.jinja"
fx("llama3", "single", '{"name": "get_current_conditions", "parameters": {"location": "San Francisco, CA", "unit": "Fahrenheit"}}',
   {"tool_calls": [call("get_current_conditions", {"location": "San Francisco, CA", "unit": "Fahrenheit"})]}, source=LS)
fx("llama3", "python_tag", '<|python_tag|>{"name": "get_weather", "parameters": {"city": "Paris"}}',
   {"tool_calls": [call("get_weather", {"city": "Paris"})]}, source="Llama 3.1 template (meta-llama-Llama-3.1-8B-Instruct.jinja) writes custom tool calls after <|python_tag|> for builtin-tools setups")
fx("llama3", "two_calls", '{"name": "get_weather", "parameters": {"city": "Paris"}}; {"name": "get_weather", "parameters": {"city": "Berlin"}}',
   {"tool_calls": [call("get_weather", {"city": "Paris"}), call("get_weather", {"city": "Berlin"})]}, source=LS + "; Llama 3.2 separates several calls with ';'")
fx("llama3", "arguments_key", '\n{"name": "get_weather", "arguments": {"city": "Madrid", "days": 1}}',
   {"tool_calls": [call("get_weather", {"city": "Madrid", "days": 1})]}, source=LS + "; 'arguments' accepted as synonym")
fx("llama3", "plain_answer", 'The weather in Paris is sunny, 24 °C.',
   {"content": "The weather in Paris is sunny, 24 °C."}, source=LS)
fx("llama3", "json_not_a_call", '{"answer": 42, "unit": "none"}',
   {"content": '{"answer": 42, "unit": "none"}'}, source="a JSON reply without name/parameters stays content")
fx("llama3", "builtin_code", '<|python_tag|>brave_search.call(query="current weather in Menlo Park, California")',
   {"content": '<|python_tag|>brave_search.call(query="current weather in Menlo Park, California")'},
   source="Llama 3.1 model card: built-in tools are called as python after <|python_tag|>; not a JSON call, kept as content")
fx("llama3", "function_tag", 'Let me look.<function=spotify_trending_songs>{"n": "5"}</function>',
   {"content": "Let me look.", "tool_calls": [call("spotify_trending_songs", {"n": "5"})]},
   source="Llama 3.1 prompt guide, custom tools: '<function=example_function_name>{\"example_name\": \"example_value\"}</function>'; functionary v3.1 template renders calls so")
fx("llama3", "function_tag_bad_json", '<function=get_weather>{"city": Paris}</function> then text',
   {"content": '<function=get_weather>{"city": Paris}</function> then text'}, source="malformed on purpose",
   streamed={"content": "then text", "tool_calls": [call("get_weather", {})]})
fx("llama3", "malformed_unterminated", '{"name": "get_weather", "parameters": {"city": "Par',
   {"content": '{"name": "get_weather", "parameters": {"city": "Par'}, source="malformed on purpose", streamed={"tool_calls": [call("get_weather", {"city": "Par"})]})

# ---------------------------------------------------------------- mistral
MS = "Mistral Nemo template: '[TOOL_CALLS][' + calls as {\"name\",\"arguments\",\"id\"} + ']'"
MS2 = "Devstral / Mistral Small 3.2 / Ministral 3 templates: '[TOOL_CALLS]' + name + ('[CALL_ID]' + id) + '[ARGS]' + arguments"
fx("mistral", "nemo_array", '[TOOL_CALLS][{"name": "get_weather", "arguments": {"city": "Paris"}, "id": "a1b2c3d4e"}]',
   {"tool_calls": [call("get_weather", {"city": "Paris"})]}, source=MS)
fx("mistral", "nemo_parallel", '[TOOL_CALLS][{"name": "get_weather", "arguments": {"city": "Paris"}}, {"name": "get_weather", "arguments": {"city": "Lyon", "days": 2}}]',
   {"tool_calls": [call("get_weather", {"city": "Paris"}), call("get_weather", {"city": "Lyon", "days": 2})]}, source=MS)
fx("mistral", "args_form", '[TOOL_CALLS]get_weather[ARGS]{"city": "Paris", "days": 2}',
   {"tool_calls": [call("get_weather", {"city": "Paris", "days": 2})]}, source=MS2)
fx("mistral", "args_parallel", '[TOOL_CALLS]get_weather[ARGS]{"city": "Paris"}[TOOL_CALLS]get_time[ARGS]{}',
   {"tool_calls": [call("get_weather", {"city": "Paris"}), call("get_time", {})]}, source=MS2)
fx("mistral", "call_id_form", 'Let me check.[TOOL_CALLS]get_weather[CALL_ID]abc123xyz[ARGS]{"city":"Nice"}',
   {"content": "Let me check.", "tool_calls": [call("get_weather", {"city": "Nice"})]}, source=MS2)
fx("mistral", "think_call", '[THINK]The user wants Paris weather.[/THINK][TOOL_CALLS]get_weather[ARGS]{"city": "Paris"}',
   {"reasoning_content": "The user wants Paris weather.", "tool_calls": [call("get_weather", {"city": "Paris"})]},
   reasoning="mistral", source="mistralai-Ministral-3-14B-Reasoning-2512.jinja: '[THINK]' + thinking + '[/THINK]', then " + MS2)
fx("mistral", "malformed_args", '[TOOL_CALLS]get_weather[ARGS]{"city": }',
   {"content": '[TOOL_CALLS]get_weather[ARGS]{"city": }'}, source="malformed on purpose", streamed={"tool_calls": [call("get_weather", {})]})
fx("mistral", "malformed_no_args", '[TOOL_CALLS]get weather now',
   {"content": '[TOOL_CALLS]get weather now'}, source="malformed on purpose")

# ------------------------------------------------------- reasoning only
fx("think", "r1_open_at_start", 'Okay, the user asks for 2 + 2. That is 4.\n</think>\n\nThe answer is **4**.',
   {"reasoning_content": "Okay, the user asks for 2 + 2. That is 4.", "content": "The answer is **4**."},
   tool_format="none", reasoning="think", open_at_start=True,
   source="deepseek-ai-DeepSeek-R1-Distill-Qwen-32B.jinja ends the generation prompt with '<think>\\n'")
fx("think", "qwen3_explicit", '<think>\nThe user greets me.\n</think>\n\nHello! How can I help?',
   {"reasoning_content": "The user greets me.", "content": "Hello! How can I help?"}, tool_format="none", reasoning="think",
   source="Qwen-Qwen3-0.6B.jinja: assistant turns '<think>\\n' + reasoning + '\\n</think>\\n\\n' + content")
fx("think", "empty_thought", '<think>\n\n</think>\n\nHi there.',
   {"content": "Hi there."}, tool_format="none", reasoning="think", source="Qwen3 with enable_thinking=false renders an empty thought")
fx("think", "unterminated", '<think>\nStill thinking about',
   {"reasoning_content": "Still thinking about"}, tool_format="none", reasoning="think", source="output cut inside the thought")
fx("think", "repeated_open_tag", '<think>\nabc</think>answer',
   {"reasoning_content": "abc", "content": "answer"}, tool_format="none", reasoning="think", open_at_start=True,
   source="prompt opened <think> and the model wrote it again")
fx("think", "raw_format_none", '<think>\nx\n</think>\n\nAnswer',
   {"content": "<think>\nx\n</think>\n\nAnswer"}, tool_format="none", reasoning="none", source="--reasoning-format none keeps raw text")
fx("think", "late_tag_is_content", 'Hello <think>not a thought</think>',
   {"content": "Hello <think>not a thought</think>"}, tool_format="none", reasoning="think", source="a thought opens only at the start")
