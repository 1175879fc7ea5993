#!/usr/bin/env python3
"""eval/run.py — run probe suites against any OpenAI-compatible URL.

  eval/run.py --base-url http://127.0.0.1:8080/v1 [--suites tools,agent,thinking,japanese]
              [--label NAME] [--out eval/results]

Writes <out>/<date>-<label>.md (a table per suite) and .json (every request
and response). Exit status 0 whether probes pass or fail (they are
measurements); 2 if the server cannot be reached.
"""
import argparse
import datetime
import json
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import agent  # noqa: E402
import common  # noqa: E402
import japanese  # noqa: E402
import thinking  # noqa: E402
import tools  # noqa: E402

SUITES = {"tools": tools.run, "agent": agent.run, "thinking": thinking.run, "japanese": japanese.run}


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--base-url", default=os.environ.get("OPENAI_BASE_URL", "http://127.0.0.1:8080/v1"))
    ap.add_argument("--api-key", default=os.environ.get("OPENAI_API_KEY"))
    ap.add_argument("--model", default=None)
    ap.add_argument("--suites", default=",".join(SUITES))
    ap.add_argument("--label", default=None)
    ap.add_argument("--max-tokens", type=int, default=1024)
    ap.add_argument("--out", default=os.path.join(os.path.dirname(os.path.abspath(__file__)), "results"))
    args = ap.parse_args(argv)
    try:
        s = common.Session(args.base_url, args.api_key, args.model, max_tokens=args.max_tokens)
    except Exception as e:
        print(f"eval: cannot reach {args.base_url}: {e}", file=sys.stderr)
        return 2
    names = [n.strip() for n in args.suites.split(",") if n.strip()]
    for n in names:
        if n not in SUITES:
            print(f"eval: unknown suite {n!r}; known: {', '.join(SUITES)}", file=sys.stderr)
            return 2
    for n in names:
        SUITES[n](s)
    label = args.label or s.model
    md = common.markdown(s.results, f"{label} at {args.base_url}")
    print(md)
    os.makedirs(args.out, exist_ok=True)
    stem = os.path.join(args.out, f"{datetime.date.today().isoformat()}-{label.replace('/', '_')}")
    with open(stem + ".md", "w") as f:
        f.write(md + "\n")
    with open(stem + ".json", "w") as f:
        json.dump(common.to_json(s.results, base_url=args.base_url, model=s.model), f, indent=1,
                  ensure_ascii=False, default=str)
    return 0


if __name__ == "__main__":
    sys.exit(main())
