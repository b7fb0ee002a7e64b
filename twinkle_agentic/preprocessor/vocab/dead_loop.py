"""DeadLoopFilter: hesitation markers (density check) and correction markers (cascade check).

Each list holds regex fragments; the filter joins all four languages into one case-insensitive
regex, so one scan counts every marker. Matches never overlap: "no wait" is one marker, not two.
"""

# --- hesitation: counted per 1000 characters -------------------------------------------------

_SEP = r"(?:\s*,\s*|\s+)"  # a comma or whitespace between two words, never nothing

EN_HESITATION = (
    rf"\bwait(?:\.{{2,}}\b|{_SEP}(?:wait|no|actually|hmm|let)\b)",
    r"\b(?:no|oh|but)\s+wait\b",
    r"\bhmm+\b",
    r"\buh+m*\b",
    rf"\bactually{_SEP}(?:no|wait|i\s+was)\b",
    rf"\bno{_SEP}actually{_SEP}(?:that|this|i)\b",
    r"\blet\s+me\s+(?:rethink|re-think|try\s+again|start\s+over|reconsider)\b",
    r"\bi'?ll\s+(?:start\s+over|try\s+again|redo\s+this)\b",
    r"\bi'?m\s+(?:getting\s+confused|going\s+in\s+circles|lost\s+here|not\s+sure\s+where)\b",
    r"\bthis\s+is\s+(?:getting|becoming)\s+(?:messy|complicated\s+fast|circular)\b",
    r"\bi\s+keep\s+(?:making|getting)\s+(?:the\s+same\s+)?error\b",
    r"\bi\s+(?:made|keep\s+making)\s+(?:the\s+same\s+)?(?:mistake|error)\s+again\b",
)

# A lone 哦, a single 嗯 and 等一下 are ordinary words and are left out on purpose.
ZH_HESITATION = (
    r"哦?等等[，,。.！!…~～]*",
    r"不不不+",
    r"嗯{2,}",
    r"呃+",
    r"不对[，,。\s]?(?:等等|重新|让我)",
    r"错了[，,。\s]?让我",
    r"让我(?:重新|再次|再)(?:想|试|来|考虑|计算)",
    r"我(?:再|重新)(?:想想|试试|来一次|考虑)",
    r"我(?:越来越|有点)?(?:搞不清楚|不确定|迷糊|乱)",
    r"这(?:变得|太|越来越)(?:复杂|乱|难以理清)",
    r"我(?:好像|似乎|又)(?:搞|弄)错",
    r"我(?:又犯|再次犯)了?错",
    r"一直(?:出错|犯错|搞错)",
)

JA_HESITATION = (
    r"ちょっと待って",
    r"待って待って",
    r"いや待って",
    r"えっと+",
    r"うーん+",
    r"あれ[、。\s]*(?:また|もう一度)",
    r"もう一度考え直",
    r"やり直し",
    r"混乱してきた",
    r"わからなくなって",
)

# Korean fillers (음/어/흠) are also ordinary syllables (마음, 어떻게, 음식), so a filler counts only
# when repeated, trailed by an ellipsis or tilde, or standing alone between non-Hangul and
# punctuation; 잠깐 only as 잠깐만(요), 아 잠깐, or before a comma, ellipsis or "!" (not 잠깐 동안).
KO_HESITATION = (
    r"(?:음|어|흠){2,}",
    r"(?:음|어|흠)(?:…|\.\.\.|~)",
    r"(?<![\uac00-\ud7a3])(?:음|어|흠)(?=[,，…!?.！？。]|$)",
    r"잠깐만요?",
    r"아\s*잠깐",
    r"잠깐(?=[,，…!！]|\.\.\.)",
    r"다시\s*(?:생각|시작|해보|해야)",
    r"헷갈(?:리기|리네|려서)",
    r"계속\s*(?:틀리|실수|잘못)",
)

# Anchors: every match of a language's hesitation regex contains one of its anchors (EN anchors are
# matched against casefolded text). Summed anchor counts bound the marker count from above, so the
# filter runs the regexes only when that bound could reach the threshold. tests/preprocessor checks
# the bound on every marker above.
EN_HESITATION_ANCHORS = (
    "wait", "hmm", "uh", "actually", "rethink", "re-think", "again", "over", "reconsider", "redo",
    "confused", "circles", "lost", "sure", "messy", "complicated", "circular", "error", "mistake",
)  # fmt: skip
ZH_HESITATION_ANCHORS = (
    "等等", "不不不", "嗯嗯", "呃", "不对", "让我", "想想", "试试", "来一次", "考虑", "搞不清楚",
    "不确定", "迷糊", "乱", "复杂", "难以理清", "错",
)  # fmt: skip
JA_HESITATION_ANCHORS = (
    "待って", "えっと", "うーん", "あれ", "考え直", "やり直し", "混乱してきた", "わからなくなって",
)  # fmt: skip
KO_HESITATION_ANCHORS = ("음", "어", "흠", "잠깐", "다시", "헷갈", "계속")

# --- correction cascade: marker starts close together ----------------------------------------

# "let me" is left out on purpose: it opens ordinary plans ("let me check the docs").
EN_CASCADE = (
    r"\bno\s+wait\b",
    r"\boh\s+wait\b",
    r"\bwait\b",
    r"\bactually\b",
    r"\bhmm\b",
    r"\bi\s+was\s+wrong\b",
    r"\bi\s+made\s+an?\s+(?:error|mistake)\b",
)
ZH_CASCADE = (r"等等", r"不对", r"重新", r"错了", r"嗯{2,}", r"让我再")

CASCADE = EN_CASCADE + ZH_CASCADE
EN_CASCADE_ANCHORS = ("wait", "actually", "hmm", "wrong", "made")
ZH_CASCADE_ANCHORS = ("等等", "不对", "重新", "错了", "嗯嗯", "让我再")
