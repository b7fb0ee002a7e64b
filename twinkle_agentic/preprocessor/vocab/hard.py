"""HardFilter: the "simple query" shapes of a lone user turn, per script.

Each entry is a regex fragment that must match the whole stripped query (case-insensitive). The EN
list applies when the query's CJK ratio is below 0.3, the CJK lists (ZH, JA, KO together) otherwise.
A greeting may be followed only by its language's punctuation tail. The greetings, their drawn-out
forms (a repeated last letter: "hellooo", "你好好", "哈哈哈") and the tails are the ones upstream
Twinkle counts as trivial.
"""

EN_PUNCT_TAIL = r"[\s!?.,]*"
ZH_PUNCT_TAIL = r"[\s!！。.，,]*"
JA_PUNCT_TAIL = r"[\s!！。.]*"
KO_PUNCT_TAIL = r"[\s!！.]*"
QUESTION_TAIL = r"[?？。]*"

EN_GREETINGS = (
    "h+e+l+l+o+",
    "h+i+",
    "hey+",
    "yo+",
    "howdy",
    "greetings",
    r"good\s+(?:morning|afternoon|evening|night|day)",
    r"what'?s\s+up",
    r"how'?s\s+it\s+going",
    r"how\s+are\s+you",
)
EN_WH_WORDS = ("what", "who", "where", "when", "why", "how")
_AUXILIARIES = ("is", "are", "was", "were", "do", "does", "did", "can", "could", "would", "should")
EN_WH_AUXILIARIES = (*_AUXILIARIES, "has", "have")  # "what has ...", not "what may ..."
EN_LEADING_AUXILIARIES = (*_AUXILIARIES, "may", "might")  # "may I ...", not "has it ..."
EN_PRONOUNS = ("you", "they", "he", "she", "it", "this", "that", "there")
EN_REQUESTS = (
    r"tell\s+me(?:\s+(?:about|more))?",
    "explain",
    "define",
    "describe",
    "list",
    "summarize",
    r"give\s+me",
)
EN_HELP = (r"(?:please\s+)?(?:help|assist)\s+me",)

EN_SIMPLE = (
    rf"(?:{'|'.join(EN_GREETINGS)}){EN_PUNCT_TAIL}",
    rf"(?:{'|'.join(EN_WH_WORDS)})(?:'s|\s+(?:{'|'.join(EN_WH_AUXILIARIES)}))\b.{{0,30}}",
    rf"(?:{'|'.join(EN_LEADING_AUXILIARIES)})\s+(?:{'|'.join(EN_PRONOUNS)})\b.{{0,30}}",
    rf"(?:{'|'.join(EN_REQUESTS)})\b.{{0,20}}",
    rf"(?:{'|'.join(EN_HELP)})\b.{{0,20}}",
)

ZH_GREETINGS = ("你好+", "您好+", "早上好", "下午好", "晚上好", "大家好", "嗨+", "哈+喽+", "哈+", "喂+")
ZH_ASK_SUFFIXES = ("是什么", "啥意思", "怎么样", "如何", "为什么")
ZH_QUESTION_WORDS = ("什么", "为什么", "怎么", "怎样", "哪", "谁", "多少", "几")
ZH_EXPLAIN = ("介绍", "解释", "告诉我", "讲讲")
ZH_POLITE_VERBS = ("解释", "介绍", "分析", "说明", "描述", "列举", "阐述", "举例")
ZH_PLEASE_ASK = "请问"

JA_GREETINGS = (
    "こんにちは+",
    "こんばんは+",
    "おはよう(?:ございます)?",
    "はじめまして",
    "やあ+",
    "よろしく(?:おねがいします)?",
    "どうも+",
)
JA_ASK_SUFFIXES = ("とは何ですか", "って何(?:ですか)?", "について教えて(?:ください)?", "ですか")
JA_QUESTION_WORDS = ("何", "なに", "なぜ", "どう", "どこ", "いつ", "誰", "どれ", "どの")

KO_GREETINGS = ("안녕(?:하세요|하십니까)?", r"좋은\s*(?:아침|오후|저녁)", "반갑습니다", "여보세요")
KO_ASK = (r"[은는]\s*무엇", "뭐")
KO_QUESTION_WORDS = ("무엇", "뭐", "왜", "어떻게", "어디", "언제")
KO_EXPLAIN = r"에\s*대해\s*(?:알려주|설명해)"

CJK_SIMPLE = (
    rf"(?:{'|'.join(ZH_GREETINGS)}){ZH_PUNCT_TAIL}",
    rf"(?:{'|'.join(JA_GREETINGS)}){JA_PUNCT_TAIL}",
    rf"(?:{'|'.join(KO_GREETINGS)}){KO_PUNCT_TAIL}",
    rf".{{0,7}}(?:{'|'.join(ZH_ASK_SUFFIXES + JA_ASK_SUFFIXES)}){QUESTION_TAIL}",
    rf"(?:{'|'.join(ZH_QUESTION_WORDS + JA_QUESTION_WORDS + KO_QUESTION_WORDS)}).{{0,7}}{QUESTION_TAIL}",
    rf"(?:{'|'.join(ZH_EXPLAIN)}).{{0,5}}{QUESTION_TAIL}",
    rf"(?:请|能否)(?:{'|'.join(ZH_POLITE_VERBS)}).{{0,10}}",
    rf"{ZH_PLEASE_ASK}.{{0,5}}",
    rf".{{0,7}}(?:{'|'.join(KO_ASK)}){QUESTION_TAIL}",
    rf".{{0,7}}{KO_EXPLAIN}",
)
