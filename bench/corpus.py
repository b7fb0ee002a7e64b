"""Synthetic multi-turn chat/agent corpus for the preprocessing benchmarks.

``generate_rows(n, seed)`` returns ``n`` rows ``{id, source, model_id, messages, user_data}`` in
EN/ZH/JA/KO, deterministic for a seed. ``source`` names the row's kind; defect kinds are injected
at the fixed shares in ``DEFECT_SHARES`` so a benchmark can compare what each filter drops with
what was planted. Text is random words from per-language vocabularies (so n-grams do not repeat by
accident), assembled into sentences drawn from a pool built once per call (fast: ~50k rows of
~5 KB in seconds). Rows use both the Arrow-stable form (JSON-string ``tool_calls``, inline
``<think>``) and the in-memory form (list ``tool_calls``, ``reasoning_content``).
"""

from __future__ import annotations

import json
import random
from collections.abc import Callable

LANG_WEIGHTS = {"en": 0.4, "zh": 0.3, "ja": 0.15, "ko": 0.15}

# Shares of planted defects (the rest are clean kinds). Keys are the row ``source``.
DEFECT_SHARES = {
    "defect/trivial_single_turn": 0.03,
    "defect/shallow_reply": 0.02,
    "defect/all_empty_assistant": 0.01,
    "defect/no_user": 0.005,
    "defect/hesitation": 0.02,
    "defect/repetition": 0.02,
    "defect/cascade": 0.005,
    "defect/refusal": 0.03,
    "defect/token_soup": 0.02,
}
CLEAN_SHARES = {
    "chat": 0.44,
    "chat/think": 0.12,
    "agent": 0.10,
    "agent/hesitant": 0.01,
    "code": 0.05,
    "math": 0.03,
    "logic": 0.02,
    "dissatisfied": 0.02,
    "normalize/cline": 0.015,
    "normalize/hermes": 0.015,
    "normalize/heartbeat": 0.01,
    "normalize/merge": 0.01,
}
MODEL_IDS = (
    "qwen3.5-4b",
    "qwen3.5-32b",
    "Qwen/qwen3-235b-a22b",
    "deepseek-ai/deepseek-v3",
    "gpt-4o",
    "llama-3-70b",
)

_EN_WORDS = ["system", "data", "model", "value", "user", "time", "process", "result", "method", "table", "query", "cache", "server", "client", "network", "request", "response", "memory", "thread", "file", "path", "graph", "node", "edge", "weight", "layer", "batch", "token", "vector", "index", "record", "field", "column", "schema", "policy", "budget", "report", "market", "price", "cost", "growth", "region", "team", "project", "plan", "design", "review", "test", "build", "deploy", "release", "version", "feature", "issue", "error", "signal", "metric", "trend", "sample", "river", "mountain", "forest", "ocean", "city", "village", "garden", "kitchen", "window", "bridge", "road", "station", "library", "museum", "history", "science", "music", "language", "culture", "school", "student", "teacher", "doctor", "patient", "energy", "climate", "water", "light", "sound", "color", "shape", "pattern", "structure", "function", "balance", "pressure", "speed", "distance", "volume", "surface", "simple", "complex", "stable", "rapid", "careful", "useful", "common", "rare", "quiet", "bright", "early", "later", "strong", "gentle", "broad", "analyze", "compare", "measure", "improve", "support", "explore", "explain", "describe", "organize", "collect", "combine", "separate", "observe", "predict", "estimate", "reduce", "increase", "extend", "connect", "transfer", "convert", "adjust", "select", "protect", "share"]
_EN_GLUE = ["the", "a", "of", "to", "in", "and", "for", "with", "on", "by", "from", "at", "as", "that", "this", "which", "when", "while"]
_ZH_WORDS = ["系统", "数据", "模型", "用户", "时间", "过程", "结果", "方法", "表格", "查询", "缓存", "服务", "网络", "请求", "响应", "内存", "线程", "文件", "路径", "节点", "权重", "批次", "向量", "索引", "记录", "字段", "结构", "策略", "预算", "报告", "市场", "价格", "成本", "增长", "地区", "团队", "项目", "计划", "设计", "测试", "部署", "版本", "功能", "问题", "信号", "指标", "趋势", "样本", "河流", "山脉", "森林", "海洋", "城市", "村庄", "花园", "厨房", "窗户", "桥梁", "道路", "车站", "图书", "博物", "历史", "科学", "音乐", "语言", "文化", "学校", "学生", "老师", "医生", "病人", "能源", "气候", "水资", "光线", "声音", "颜色", "形状", "模式", "平衡", "压力", "速度", "距离", "体积", "表面", "简单", "复杂", "稳定", "快速", "仔细", "有用", "常见", "稀有", "安静", "明亮", "早期", "后来", "强大", "温和", "分析", "比较", "测量", "改进", "支持", "探索", "说明", "描述", "组织", "收集", "结合", "分离", "观察", "预测", "估计", "减少", "增加", "扩展", "连接", "转换"]
_ZH_GLUE = list("的了在和是对从把被给让就也都还")
_JA_WORDS = ["システム", "データ", "モデル", "ユーザー", "時間", "処理", "結果", "方法", "表", "検索", "キャッシュ", "サーバー", "通信", "要求", "応答", "記憶", "ファイル", "経路", "重み", "索引", "記録", "構造", "方針", "予算", "報告", "市場", "価格", "費用", "成長", "地域", "計画", "設計", "試験", "機能", "問題", "信号", "指標", "傾向", "山", "森", "海", "都市", "村", "庭", "台所", "窓", "橋", "道", "駅", "図書館", "博物館", "歴史", "科学", "音楽", "言語", "文化", "学校", "学生", "先生", "医者", "患者", "気候", "光", "音", "色", "形", "圧力", "速度", "距離", "表面", "安定", "迅速", "丁寧", "便利", "静か", "明るい", "強い", "分析", "比較", "測定", "改善", "支援", "探索", "説明", "整理", "収集", "結合", "観察", "予測", "推定", "削減", "増加", "拡張", "接続", "変換", "調整", "選択", "保護", "共有"]
_JA_GLUE = ["は", "が", "を", "に", "で", "と", "の", "も", "から", "まで"]
_KO_WORDS = ["시스템", "데이터", "모델", "사용자", "시간", "과정", "결과", "방법", "표", "질의", "캐시", "서버", "네트워크", "요청", "응답", "메모리", "파일", "경로", "가중치", "색인", "기록", "구조", "정책", "예산", "보고서", "시장", "가격", "비용", "성장", "지역", "팀", "계획", "설계", "시험", "배포", "버전", "기능", "문제", "신호", "지표", "추세", "표본", "강", "산", "숲", "바다", "도시", "마을", "정원", "부엌", "창문", "다리", "도로", "역", "도서관", "박물관", "역사", "과학", "음악", "언어", "문화", "학교", "학생", "선생님", "의사", "환자", "에너지", "기후", "빛", "소리", "색깔", "모양", "균형", "압력", "속도", "거리", "분석", "비교", "측정", "개선", "지원", "탐색", "설명", "정리", "수집", "결합", "관찰", "예측", "추정", "감소", "증가", "확장", "연결", "변환", "조정"]
_KO_GLUE = ["은", "는", "이", "가", "을", "를", "에서", "으로", "와", "의"]
_END = {"en": ".", "zh": "。", "ja": "。", "ko": "."}

QUESTIONS = {
    "en": "Could you give me a detailed explanation of how {a} and {b} interact in a {c} setting, with examples?",
    "zh": "请详细分析一下{a}和{b}在{c}场景中的相互关系，并给出具体的例子和步骤。",
    "ja": "{a}と{b}が{c}の環境でどのように関係するのか、具体例を挙げて詳しく説明してください。",
    "ko": "{a}와 {b}가 {c} 환경에서 어떻게 상호작용하는지 예시와 함께 자세히 설명해 주실 수 있나요?",
}
TRIVIAL = {
    "en": ["hi", "hello!", "What is AI?", "thanks", "ok", "hey there", "Who are you?", "explain recursion"],
    "zh": ["你好", "您好！", "什么是AI", "谢谢", "嗨", "AI是什么？", "介绍一下你自己"],
    "ja": ["こんにちは", "AIとは何ですか", "ありがとう", "はい", "何ですか"],
    "ko": ["안녕하세요", "안녕!", "고마워요", "네", "왜요?"],
}
REFUSALS = {
    "en": [
        "I'm sorry, but I can't help with that request.",
        "I cannot assist with this because it goes against the guidelines I follow.",
        "Unfortunately, I am unable to provide that information.",
        "I must decline to answer this question.",
    ],
    "zh": [
        "非常抱歉，我无法回答这个问题。",
        "我不能提供这些信息，请理解。",
        "您的请求违反了使用规定，无法继续。",
    ],
    "ja": [
        "その質問にはお答えすることはできません。",
        "恐れ入りますが、そのご依頼には対応できません。",
        "ご要望にはお応えできません。",
    ],
    "ko": [
        "죄송하지만 그 요청은 도와드릴 수 없습니다.",
        "해당 내용은 답변드리기 어렵습니다.",
        "요청을 거절합니다.",
    ],
}
HESITATIONS = {
    "en": ["Wait, no.", "Hmm.", "Actually, no.", "Let me rethink this.", "I'm getting confused.", "Oh wait."],
    "zh": ["等等，", "不对，重新", "嗯嗯", "让我重新想", "我有点搞不清楚", "呃"],
    "ja": ["ちょっと待って", "えっと", "うーん", "やり直し", "混乱してきた"],
    "ko": ["음음", "잠깐만요", "다시 생각해 보면", "헷갈리네", "어..."],
}
DISSATISFIED = {
    "en": ["That's wrong, you misunderstood my question.", "This is not what I asked, please redo it."],
    "zh": ["你答非所问，重新回答。", "错了，请重新回答。"],
    "ja": ["それは違います、もう一度お願いします。"],
    "ko": ["틀렸어요, 다시 해 주세요."],
}
CODE_SNIPPETS = (
    "```python\ndef {f}(items):\n    result = []\n    for x in items:\n        if x > 0:\n            result.append(x * 2)\n    return result\n```",
    "```javascript\nconst {f} = (items) => {{\n  return items.filter((x) => x > 0).map((x) => x * 2);\n}};\n```",
    "```python\nimport json\n\nclass {F}:\n    def __init__(self, path):\n        self.path = path\n\n    def load(self):\n        with open(self.path) as f:\n            return json.load(f)\n```",
)
MATH_SNIPPETS = (
    "We solve $x^2 - 5x + 6 = 0$, so $x = 2$ or $x = 3$. The derivative is $f'(x) = 2x - 5$.",
    "By the theorem, $\\sum_{{i=1}}^{{n}} i = \\frac{{n(n+1)}}{{2}}$; for n = 10 we get 55, and 3 + 4 = 7.",
    "设方程 $a^2 + b^2 = c^2$，其中 α 和 β 为锐角，则 $\\sin^2 α + \\cos^2 α = 1$，所以 2 + 3 = 5。",
)
LOGIC_SNIPPETS = {
    "en": "Firstly, consider {a}. Moreover, {b} matters. Therefore, if {a} grows then {b} shrinks. "
    "There is a trade-off, with pros and cons on both sides. In conclusion, balance {a} and {b}.",
    "zh": "首先，考虑{a}；其次，{b}也很重要。如果{a}增加，那么{b}会减少。因为{a}有限，所以需要权衡。"
    "综上所述，需要比较两者的优缺点。",
}
SOUP = (
    lambda t: t[: len(t) // 2] + "\ufffd" * max(8, len(t) // 20) + t[len(t) // 2 :],
    lambda t: t + " " + " ".join(["<|im_end|>", "<|endoftext|>", "[PAD]", "</s>"] * 6),
    lambda t: t + " " + "!" * 40,
    lambda t: "".join(c + "\x07" if i % 20 == 0 else c for i, c in enumerate(t)),
    lambda t: _script_salad(random.Random(len(t))),
)


def _script_salad(rng: random.Random) -> str:
    return " ".join("".join(rng.choice("aбα中ア가ש١ก") for _ in range(6)) for _ in range(30))


class _Writer:
    """Random text in one language from a pre-built sentence pool."""

    def __init__(self, rng: random.Random, pool_size: int = 3000) -> None:
        self.rng = rng
        vocab = {
            "en": (_EN_WORDS, _EN_GLUE, " "),
            "zh": (_ZH_WORDS, _ZH_GLUE, ""),
            "ja": (_JA_WORDS, _JA_GLUE, ""),
            "ko": (_KO_WORDS, _KO_GLUE, " "),
        }
        self.words = {lang: v[0] for lang, v in vocab.items()}
        self.pools: dict[str, list[str]] = {}
        for lang, (words, glue, sep) in vocab.items():
            pool = []
            for _ in range(pool_size):
                n = rng.randint(6, 18)
                parts = [rng.choice(words) if rng.random() < 0.7 else rng.choice(glue) for _ in range(n)]
                sentence = sep.join(parts) + _END[lang]
                pool.append(sentence[0].upper() + sentence[1:] if lang == "en" else sentence)
            self.pools[lang] = pool

    def sentences(self, lang: str, n: int) -> str:
        sep = " " if lang in ("en", "ko") else ""
        return sep.join(self.rng.choices(self.pools[lang], k=n))

    def paragraphs(self, lang: str, n_sentences: int) -> str:
        out, left = [], n_sentences
        while left > 0:
            k = min(left, self.rng.randint(3, 7))
            out.append(self.sentences(lang, k))
            left -= k
        return "\n\n".join(out)

    def word(self, lang: str) -> str:
        return self.rng.choice(self.words[lang])

    def question(self, lang: str) -> str:
        return QUESTIONS[lang].format(a=self.word(lang), b=self.word(lang), c=self.word(lang))


def _user(text: str) -> dict:
    return {"role": "user", "content": text, "tool_calls": "", "tool_call_id": ""}


def _assistant(text: str, **extra) -> dict:
    return {"role": "assistant", "content": text, "tool_calls": "", "tool_call_id": "", **extra}


def _reply(w: _Writer, lang: str, lo: int = 10, hi: int = 60) -> str:
    return w.paragraphs(lang, w.rng.randint(lo, hi))


def _chat(w: _Writer, lang: str, think: bool = False, rounds: int | None = None) -> list[dict]:
    rng = w.rng
    msgs: list[dict] = []
    if rng.random() < 0.3:
        msgs.append({"role": "system", "content": w.sentences(lang, 2), "tool_calls": "", "tool_call_id": ""})
    for _ in range(rounds or rng.choice((1, 1, 2, 2, 3, 4))):
        msgs.append(_user(w.question(lang) + " " + w.sentences(lang, rng.randint(0, 3))))
        body = _reply(w, lang)
        if think and rng.random() < 0.7:
            body = f"<think>\n{_reply(w, lang, 3, 12)}\n</think>\n\n{body}"
            msgs.append(_assistant(body))
        elif think:
            msgs.append({"role": "assistant", "content": body, "reasoning_content": _reply(w, lang, 3, 12)})
        else:
            msgs.append(_assistant(body))
    return msgs


def _agent(w: _Writer, lang: str, hesitant: bool = False) -> list[dict]:
    rng = w.rng
    msgs = [_user(w.question(lang))]
    for k in range(rng.randint(1, 3)):
        call = {
            "id": f"call_{k}",
            "type": "function",
            "function": {
                "name": rng.choice(("search", "read_file", "run_sql")),
                "arguments": json.dumps({"query": w.sentences(lang, 1)}, ensure_ascii=False),
            },
        }
        text = w.sentences(lang, rng.randint(1, 3))
        if hesitant:
            text = " ".join(HESITATIONS[lang] * 3) + text
        if rng.random() < 0.5:  # Arrow-stable form
            msgs.append(_assistant(text, tool_calls=json.dumps([call], ensure_ascii=False)))
            msgs.append(
                {
                    "role": "tool",
                    "content": _reply(w, lang, 2, 10),
                    "tool_calls": "",
                    "tool_call_id": call["id"],
                }
            )
        else:  # in-memory form
            msgs.append({"role": "assistant", "content": text, "tool_calls": [call]})
            msgs.append({"role": "tool", "content": _reply(w, lang, 2, 10), "tool_call_id": call["id"]})
    msgs.append(_assistant(_reply(w, lang, 4, 20)))
    return msgs


def _planted(kind: str, w: _Writer, lang: str) -> list[dict]:
    rng = w.rng
    if kind == "chat":
        return _chat(w, lang)
    if kind == "chat/think":
        return _chat(w, lang, think=True)
    if kind == "agent":
        return _agent(w, lang)
    if kind == "agent/hesitant":
        return _agent(w, lang, hesitant=True)
    if kind == "code":
        snippet = rng.choice(CODE_SNIPPETS).format(
            f=f"process_{w.word('en')}", F=w.word("en").title() + "Loader"
        )
        return [
            _user(w.question(lang)),
            _assistant(w.sentences(lang, 3) + "\n\n" + snippet + "\n\n" + _reply(w, lang, 3, 10)),
        ]
    if kind == "math":
        return [
            _user(w.question(lang)),
            _assistant(rng.choice(MATH_SNIPPETS) + "\n\n" + _reply(w, lang, 3, 10)),
        ]
    if kind == "logic":
        tpl = LOGIC_SNIPPETS.get(lang, LOGIC_SNIPPETS["en"])
        return [
            _user(w.question(lang)),
            _assistant(tpl.format(a=w.word(lang), b=w.word(lang)) + "\n\n" + _reply(w, lang, 3, 10)),
        ]
    if kind == "dissatisfied":
        msgs = _chat(w, lang, rounds=1)
        return msgs + [_user(rng.choice(DISSATISFIED[lang])), _assistant(_reply(w, lang))]
    if kind == "normalize/cline":
        path = f"src/{w.word('en')}.py"
        call = f"{w.sentences(lang, 1)}\n<read_file>\n<path>{path}</path>\n</read_file>"
        return [
            _user(w.question(lang)),
            _assistant(call),
            _user(f"[read_file for '{path}'] Result:\n{_reply(w, lang, 2, 6)}"),
            _assistant(_reply(w, lang)),
        ]
    if kind == "normalize/hermes":
        call = json.dumps(
            {"name": "search", "arguments": {"query": w.sentences(lang, 1)}}, ensure_ascii=False
        )
        return [
            _user(w.question(lang)),
            _assistant(f"{w.sentences(lang, 1)}\n<tool_call>\n{call}\n</tool_call>"),
            _user(_reply(w, lang, 2, 6)),
            _assistant(_reply(w, lang)),
        ]
    if kind == "normalize/heartbeat":
        return [
            {"role": "developer", "content": w.sentences(lang, 1)},
            _user("heartbeat"),
            _assistant("ok"),
            *_chat(w, lang, rounds=1),
        ]
    if kind == "normalize/merge":
        q = w.question(lang)
        return [
            _user(q[: len(q) // 2]),
            _user(q[len(q) // 2 :]),
            _assistant(_reply(w, lang, 3, 10)),
            _assistant(_reply(w, lang, 3, 10)),
        ]
    if kind == "defect/trivial_single_turn":
        return [_user(rng.choice(TRIVIAL[lang])), _assistant(_reply(w, lang, 2, 6))]
    if kind == "defect/shallow_reply":
        return [_user(w.question(lang)), _assistant(rng.choice(("OK.", "Sure.", "好的。", "はい。", "네.")))]
    if kind == "defect/all_empty_assistant":
        return [_user(w.question(lang)), _assistant(""), _user(w.question(lang)), _assistant("  ")]
    if kind == "defect/no_user":
        return [{"role": "system", "content": w.sentences(lang, 1)}, _assistant(_reply(w, lang))]
    if kind == "defect/hesitation":
        marks = HESITATIONS[lang]
        body = " ".join(f"{rng.choice(marks)} {w.sentences(lang, 1)}" for _ in range(rng.randint(10, 25)))
        return [_user(w.question(lang)), _assistant(body)]
    if kind == "defect/repetition":
        block = w.sentences(lang, rng.randint(3, 6))
        sep = " " if lang in ("en", "ko") else ""
        return [_user(w.question(lang)), _assistant(sep.join([block] * rng.randint(6, 12)))]
    if kind == "defect/cascade":
        marks = (
            ["Wait,", "Actually,", "Hmm,", "No wait,"]
            if lang != "zh"
            else ["等等，", "不对，", "重新", "嗯嗯"]
        )
        body = (
            w.sentences(lang, 3)
            + " "
            + " ".join(f"{rng.choice(marks)} {w.word(lang)}" for _ in range(8))
            + " "
            + _reply(w, lang, 10, 20)
        )
        return [_user(w.question(lang)), _assistant(body)]
    if kind == "defect/refusal":
        return [
            _user(w.question(lang)),
            _assistant(rng.choice(REFUSALS[lang]) + " " + w.sentences(lang, rng.randint(4, 10))),
        ]
    if kind == "defect/token_soup":
        mangle: Callable[[str], str] = rng.choice(SOUP)
        return [_user(w.question(lang)), _assistant(mangle(_reply(w, lang, 4, 12)))]
    raise ValueError(f"unknown row kind {kind!r}")


KINDS = {**CLEAN_SHARES, **DEFECT_SHARES}


def generate_rows(n: int, seed: int = 0) -> list[dict]:
    """``n`` deterministic rows; ``source`` is the row kind (see ``KINDS``), user_data holds the language."""
    rng = random.Random(seed)
    writer = _Writer(rng)
    kinds, weights = zip(*KINDS.items(), strict=True)
    langs, lang_weights = zip(*LANG_WEIGHTS.items(), strict=True)
    rows = []
    for i in range(n):
        kind = rng.choices(kinds, weights)[0]
        lang = rng.choices(langs, lang_weights)[0]
        rows.append(
            {
                "id": f"row-{seed}-{i:07d}",
                "source": kind,
                "model_id": rng.choice(MODEL_IDS),
                "messages": _planted(kind, writer, lang),
                "user_data": [["lang", json.dumps(lang)]],
            }
        )
    return rows
