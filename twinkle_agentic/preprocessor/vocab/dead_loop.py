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

# --- anchors: cheap upper bounds on the marker counts ----------------------------------------
# The filter counts anchors with C-level scans and runs a language's regex only when the anchor
# count could reach the threshold. Soundness needs: every match of a language's regex contains one
# of that language's anchors, at a position no other match of that regex uses (matches never
# overlap, so an anchor inside the match, or starting at its first character, qualifies).
# tests/preprocessor checks every marker above against these lists.

# English anchors are whole words of the text lowercased with every non-word character read as a
# space ("I'm" is "i" and "m"); every English marker contains one of EN_*_WORDS as a whole word,
# or (hesitation only) a word starting with one of EN_HESITATION_PREFIXES (hmm+, uh+m*).
EN_HESITATION_WORDS = (
    "wait", "actually", "let", "ll", "ill", "m", "im", "getting", "becoming", "keep", "made",
)  # fmt: skip
EN_HESITATION_PREFIXES = ("hmm", "uh")
EN_CASCADE_WORDS = ("wait", "actually", "hmm", "wrong", "made")
# Non-ASCII characters that re.IGNORECASE equates with an ASCII letter (tests derive the list from
# the regex engine itself); they are mapped to that letter before the English anchors are counted.
EN_CASE_EQUIVALENTS = {"\u0130": "i", "\u0131": "i", "\u017f": "s", "\u212a": "k"}

# CJK anchors are character pairs (or single characters) starting inside each match; "$" as the
# second character stands for the end of the text (the Korean lone filler's "$", which also
# matches before a final newline: hence the "\n" pairs).
ZH_HESITATION_PAIRS = (
    "等等", "不不", "嗯嗯", "不对", "错了", "我再", "我重", "搞不", "不确", "迷糊", "这变", "这太", "这越",
    "搞错", "弄错", "又犯", "次犯", "出错", "犯错",
)  # fmt: skip
ZH_HESITATION_SINGLES = ("呃", "乱")
JA_HESITATION_PAIRS = ("待っ", "えっ", "うー", "あれ", "考え", "やり", "混乱", "わか")
_KO_FILLERS = "음어흠"
KO_HESITATION_PAIRS = (
    *(a + b for a in _KO_FILLERS for b in _KO_FILLERS),
    *(a + b for a in _KO_FILLERS for b in "….~,，!?！？。$\n"),
    "잠깐", "다시", "헷갈", "계속",
)  # fmt: skip
ZH_CASCADE_PAIRS = ("等等", "不对", "重新", "错了", "嗯嗯", "我再")

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
