"""eval/japanese.py — a Japanese task set with automatic checks (output budget 8,192 tokens).

Each task's check is in code: a 50-character limit, required words, JSON
format, number transcription, keigo, a 150-character summary that keeps 6
proper nouns, long-text extraction, translation, counting, a list of four
seasons, and a subject question. Characters are counted as Unicode code points
after stripping surrounding whitespace.
"""
import json
import re

from common import text, tokens

FILLER = ("本日の議題は来期の予算と人員計画についてである。各部署からの報告によれば、昨年度の売上は前年比で微増した。"
          "一方で物流費の上昇が続いており、利益率の改善が課題となっている。")
LONG = (FILLER * 12 + "なお、次回の会議は第3会議室で午後2時から開催されます。" + FILLER * 12)

SUMMARY_SRC = ("田中さんは東京の本社からトヨタの工場がある大阪へ出張した。途中、新幹線の窓から富士山が見えた。"
               "大阪では佐藤さんと合流し、新しい部品の品質について三時間にわたって議論した。"
               "議論の結果、来月から検査工程を一つ増やすことが決まり、二人は夜の便で東京へ戻った。")
NOUNS = ["田中", "東京", "トヨタ", "大阪", "富士山", "佐藤"]


def first_json(t):
    m = re.search(r"\{.*\}", t, re.S)
    return json.loads(m.group(0)) if m else None


TASKS = [
    ("50字以内", "日本の首都について50文字以内で説明してください。",
     lambda t: len(t) <= 50 and "東京" in t),
    ("必須語", "「桜」「春」「川」の三語をすべて使って、短い文を一つ書いてください。",
     lambda t: all(w in t for w in ("桜", "春", "川"))),
    ("JSON形式", "次の情報をJSONだけで出力してください。キーは name と age です。名前は山田太郎、年齢は35歳。",
     lambda t: (lambda j: j is not None and j.get("name") == "山田太郎" and j.get("age") in (35, "35"))(first_json(t))),
    ("数字の転記", "次の漢数字をアラビア数字で書いてください：三千五百二十一",
     lambda t: "3521" in t.replace(",", "").replace("３５２１", "3521")),
    ("敬語", "「明日そちらに行く」を、目上の人に使う丁寧な敬語の表現に書き換えてください。",
     lambda t: any(k in t for k in ("参ります", "伺います", "うかがいます", "まいります", "お伺い"))),
    ("150字要約", "次の文章を150文字以内で要約してください。人名・地名・社名はすべて残してください。\n" + SUMMARY_SRC,
     lambda t: len(t) <= 150 and all(n in t for n in NOUNS)),
    ("長文抽出", LONG + "\n\n質問：次回の会議はどこで何時からですか？",
     lambda t: ("第3会議室" in t or "第三会議室" in t or "第３会議室" in t) and
     any(h in t for h in ("2時", "２時", "14時", "14:00", "午後二時"))),
    ("翻訳", "「ありがとうございます」を英語に翻訳してください。", lambda t: "thank" in t.lower()),
    ("文字数", "「あいうえお」は何文字ですか？数字だけで答えてください。", lambda t: bool(re.search(r"(^|\D)[5５](\D|$)", t))),
    ("四季", "日本の四季を箇条書きで答えてください。", lambda t: all(w in t for w in ("春", "夏", "秋", "冬"))),
    ("主語", "次の文の主語を一語で答えてください：猫が魚を食べた。", lambda t: "猫" in t),
]


def run(s, max_tokens=8192):
    for label, prompt, check in TASKS:
        def probe(tr, prompt=prompt, check=check):
            r = s.chat([{"role": "user", "content": prompt}], tr, max_tokens=max_tokens)
            t = text(r).strip()
            return check(t), tokens(r), t[:60]
        s.probe("japanese", label, probe)
