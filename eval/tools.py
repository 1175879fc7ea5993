"""eval/tools.py — tool-calling probes (the reference measurements' four scenarios).

1. single call, 5 cases: one request, one expected tool and argument check;
2. parallel-call format: two independent lookups must come back as several
   tool_calls in ONE assistant message;
3. tool_choice "required" on small talk: at least one call, to a declared tool,
   with every required argument present;
4. a pseudo file system worked through over several turns: the probe executes
   list_dir/read_file/write_file against an in-memory tree and passes only if
   the file the task asks for ends up with the right content.
"""
import json

from common import text, tokens, tool_calls

WEATHER = {"type": "function", "function": {
    "name": "get_weather", "description": "Current weather for a city.",
    "parameters": {"type": "object", "properties": {
        "city": {"type": "string"}, "unit": {"type": "string", "enum": ["celsius", "fahrenheit"]}},
        "required": ["city"]}}}
TIME = {"type": "function", "function": {
    "name": "get_time", "description": "Current local time in an IANA timezone.",
    "parameters": {"type": "object", "properties": {"timezone": {"type": "string"}}, "required": ["timezone"]}}}
EMAIL = {"type": "function", "function": {
    "name": "send_email", "description": "Send an email.",
    "parameters": {"type": "object", "properties": {
        "to": {"type": "string"}, "subject": {"type": "string"}, "body": {"type": "string"}},
        "required": ["to", "subject", "body"]}}}
SEARCH = {"type": "function", "function": {
    "name": "search_web", "description": "Search the web.",
    "parameters": {"type": "object", "properties": {"query": {"type": "string"}}, "required": ["query"]}}}
CALC = {"type": "function", "function": {
    "name": "calculate", "description": "Evaluate an arithmetic expression exactly.",
    "parameters": {"type": "object", "properties": {"expression": {"type": "string"}}, "required": ["expression"]}}}
BASIC = [WEATHER, TIME, EMAIL, SEARCH, CALC]

FS_TOOLS = [
    {"type": "function", "function": {"name": "list_dir", "description": "List a directory.",
     "parameters": {"type": "object", "properties": {"path": {"type": "string"}}, "required": ["path"]}}},
    {"type": "function", "function": {"name": "read_file", "description": "Read a text file.",
     "parameters": {"type": "object", "properties": {"path": {"type": "string"}}, "required": ["path"]}}},
    {"type": "function", "function": {"name": "write_file", "description": "Write a text file.",
     "parameters": {"type": "object", "properties": {"path": {"type": "string"}, "content": {"type": "string"}},
                    "required": ["path", "content"]}}},
]

SINGLE_CASES = [
    ("weather", "What's the weather like in Tokyo right now?", "get_weather",
     lambda a: "tokyo" in str(a.get("city", "")).lower()),
    ("time", "What time is it now in the Europe/Paris timezone?", "get_time",
     lambda a: "paris" in str(a.get("timezone", "")).lower()),
    ("email", "Send an email to bob@example.com with the subject 'Lunch' saying I'll be ten minutes late.",
     "send_email", lambda a: a.get("to", "").strip().lower() == "bob@example.com"),
    ("search", "Search the web for the release notes of Python 3.13.", "search_web",
     lambda a: "3.13" in str(a.get("query", ""))),
    ("calculate", "Use the calculator: what is 1234 * 5678?", "calculate",
     lambda a: "1234" in str(a.get("expression", "")) and "5678" in str(a.get("expression", ""))),
]


def schema_ok(call, tools):
    """Name declared and every required argument present."""
    name, args = call
    for t in tools:
        f = t["function"]
        if f["name"] == name:
            return all(k in args for k in f["parameters"].get("required", []))
    return False


def run(s):
    for label, prompt, want, check in SINGLE_CASES:
        def probe(tr, prompt=prompt, want=want, check=check):
            r = s.chat([{"role": "user", "content": prompt}], tr, tools=BASIC, tool_choice="auto")
            calls = tool_calls(r)
            ok = len(calls) >= 1 and calls[0][0] == want and check(calls[0][1])
            return ok, tokens(r), f"calls={calls}" if calls else f"no call; said: {text(r)[:80]}"
        s.probe("tools", f"single call: {label}", probe)

    def parallel(tr):
        r = s.chat([{"role": "user", "content": "What's the weather in Tokyo and in Paris? Look both up."}],
                   tr, tools=BASIC, tool_choice="auto", parallel_tool_calls=True)
        calls = tool_calls(r)
        cities = {str(a.get("city", "")).lower() for n, a in calls if n == "get_weather"}
        ok = any("tokyo" in c for c in cities) and any("paris" in c for c in cities)
        return ok, tokens(r), f"{len(calls)} call(s) in one message: {calls}"
    s.probe("tools", "parallel calls in one message", parallel)

    def required(tr):
        r = s.chat([{"role": "user", "content": "Hi there! How are you today?"}], tr,
                   tools=BASIC, tool_choice="required")
        calls = tool_calls(r)
        ok = len(calls) >= 1 and all(schema_ok(c, BASIC) for c in calls)
        return ok, tokens(r), f"calls={calls}"
    s.probe("tools", "tool_choice required", required)

    def filesystem(tr):
        fs = {"/notes/a.txt": "Groceries: milk, eggs\nbread",
              "/notes/b.txt": "Q3 budget is 42,000 EUR\nApproved by Ana",
              "/notes/c.txt": "Call the plumber on Friday"}
        msgs = [{"role": "system", "content": "You operate on a file system only through the tools."},
                {"role": "user", "content": "In /notes there is one file that mentions the budget. "
                 "Write the first line of that file into /summary.txt."}]
        total = 0
        for _ in range(8):
            r = s.chat(msgs, tr, tools=FS_TOOLS, tool_choice="auto")
            total += tokens(r)
            m = r.choices[0].message
            if not m.tool_calls:
                break
            msgs.append({"role": "assistant", "content": m.content or "",
                         "tool_calls": [c.model_dump() for c in m.tool_calls]})
            for c in m.tool_calls:
                a = json.loads(c.function.arguments or "{}")
                p = str(a.get("path", ""))
                if c.function.name == "list_dir":
                    d = p.rstrip("/") + "/"
                    out = "\n".join(sorted(k[len(d):] for k in fs if k.startswith(d))) or "(empty)"
                elif c.function.name == "read_file":
                    out = fs.get(p, f"error: {p} not found")
                elif c.function.name == "write_file":
                    fs[p] = str(a.get("content", ""))
                    out = "ok"
                else:
                    out = "error: unknown tool"
                msgs.append({"role": "tool", "tool_call_id": c.id, "content": out})
        got = fs.get("/summary.txt", "").strip()
        return got == "Q3 budget is 42,000 EUR", total, f"/summary.txt={got!r}"
    s.probe("tools", "pseudo file system, multi-turn", filesystem)
