"""RefuseFilter: self-referential refusals in EN, ZH, JA and KO.

Word lists are joined into regex alternations; the filter compiles every pattern below into one
case-insensitive regex. Gaps are bounded (``.{0,N}``) so a refusal must be one local phrase:
"I cannot stress enough" or "he can't help" never match.
"""

# --- English ---------------------------------------------------------------------------------

EN_SUBJECTS = ("i", "we")
EN_REFUSAL_MODALS = (
    "can't",
    "cannot",
    r"(?:am|are)\s+not\s+able",
    "won't",
    r"will\s+not",
    r"(?:am|are)\s+unable",
    r"(?:must|have\s+to)\s+decline",
    r"decline\s+to",
    r"refuse\s+to",
    r"am\s+not\s+(?:allowed|permitted|authorized|comfortable)\s+to",
)
EN_TASK_VERBS = (
    "help", "assist", "answer", "respond", "provide", "generate", "create", "produce", "fulfill",
    "comply", "address", "process", "complete", "handle", "discuss", "support",
)  # fmt: skip
EN_APOLOGIES = (r"i'?m\s+sorry", r"i\s+apologize", "unfortunately", r"i\s+regret")
EN_APOLOGY_INABILITY = (
    "can't",
    "cannot",
    "unable",
    "won't",
    r"will\s+not",
    r"(?:must|have\s+to)\s+decline",
    r"not\s+(?:allowed|able|comfortable|appropriate)",
)
EN_POLICY_DETERMINERS = ("this", "that", "your", "the")
EN_POLICY_OBJECTS = ("request", "question", "prompt", "content", "topic", "task")
EN_POLICY_VERDICTS = (
    r"violates?",
    r"goes\s+against",
    r"is\s+not\s+(?:appropriate|allowed|permitted)",
    r"is\s+inappropriate",
)


def _any(words: tuple[str, ...]) -> str:
    return "(?:" + "|".join(words) + ")"


EN_PATTERNS = (
    rf"\b{_any(EN_SUBJECTS)}\b.{{0,25}}?\b{_any(EN_REFUSAL_MODALS)}\b.{{0,60}}?\b{_any(EN_TASK_VERBS)}\b",
    rf"\b{_any(EN_APOLOGIES)}\b.{{0,80}}?\b{_any(EN_APOLOGY_INABILITY)}\b",
    rf"\b{_any(EN_POLICY_DETERMINERS)}\s+{_any(EN_POLICY_OBJECTS)}\b.{{0,60}}?\b{_any(EN_POLICY_VERDICTS)}\b",
    rf"\b{_any(EN_SUBJECTS)}\s+(?:must|have\s+to|need\s+to)\s+(?:decline|refuse)\b",
    rf"\b{_any(EN_SUBJECTS)}\s+(?:decline|refuse)\s+(?:this|your|to)\b",
    r"\bthis\s+(?:falls\s+outside|is\s+beyond)\s+(?:what\s+i|my)\b",
    rf"\bas\s+an\s+ai\b.{{0,30}}?\bi\s+(?:can't|cannot)\s+{_any(EN_TASK_VERBS)}\b",
)

# --- Chinese ---------------------------------------------------------------------------------

ZH_INABILITY = ("无法", "不能", "不可以", "没有办法", "不便", "不适合", "不被允许", "不被授权")
ZH_APOLOGY_INABILITY = ("无法", "不能", "不可以", "不便", "没有办法")
ZH_TASKS = ("帮", "回答", "提供", "生成", "处理", "协助", "完成", "执行", "回复", "解答")
ZH_PATTERNS = (
    rf"(?:非常|十分|很|极为)?(?:抱歉|对不起).{{0,40}}?{_any(ZH_APOLOGY_INABILITY)}",
    rf"我{_any(ZH_INABILITY)}.{{0,30}}?{_any(ZH_TASKS)}",
    r"(?:您的|这个|该)(?:请求|问题|内容|话题).{0,20}?(?:违反|不当|不合适|超出了?我)",
    rf"作为(?:AI|人工智能|语言模型|大模型).{{0,10}}?{_any(ZH_INABILITY)}.{{0,30}}?{_any(ZH_TASKS)}",
)

# --- Japanese --------------------------------------------------------------------------------

JA_PATTERNS = (
    r"(?:申し訳|恐れ入り)ます(?:が|けれど).{0,40}?できません",
    r"(?:回答|対応|お答え)(?:する|いたす)ことはできません",
    r"ご要望にはお(?:応え|答え)できません",
    r"(?:その|この)(?:リクエスト|質問|依頼).{0,20}?(?:お断り|辞退|対応できません)",
)

# --- Korean ----------------------------------------------------------------------------------

KO_PATTERNS = (
    r"(?:죄송하지만|유감스럽게도).{0,40}?(?:드릴\s*수\s*없|없습니다|못합니다)",
    r"(?:답변|도움|처리|제공)(?:드리기|하기)\s*(?:어렵|불가|할\s*수\s*없)",
    r"(?:요청|질문|내용).{0,20}?(?:거절|거부|응할\s*수\s*없)",
)

PATTERNS = EN_PATTERNS + ZH_PATTERNS + JA_PATTERNS + KO_PATTERNS

# Gate: every pattern above contains one of these literals (in casefolded text whose whitespace runs
# are collapsed to one space), so a window holding none of them cannot match and skips the regex.
EN_ANCHORS = (
    "can't", "cannot", "unable", "not able", "won't", "will not", "decline", "refuse", "not allowed",
    "not permitted", "not authorized", "not comfortable", "sorry", "apologize", "unfortunately",
    "regret", "violate", "goes against", "not appropriate", "inappropriate", "outside", "beyond",
)  # fmt: skip
ZH_ANCHORS = (
    "抱歉", "对不起", "我无法", "我不能", "我不可以", "我没有办法", "我不便", "我不适合", "我不被",
    "违反", "不当", "不合适", "超出", "作为",
)  # fmt: skip
JA_ANCHORS = ("できません", "お断り", "辞退")
KO_ANCHORS = ("죄송하지만", "유감스럽게도", "드리기", "하기", "거절", "거부", "응할")
ANCHORS = EN_ANCHORS + ZH_ANCHORS + JA_ANCHORS + KO_ANCHORS
