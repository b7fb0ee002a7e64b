"""IntentClassifier: what each detector counts. Every list is joined into one regex per detector."""

# Code: a fenced block with >= 10 characters inside counts at once; otherwise keyword hits.
CODE_FENCE = r"```(?:(?!```).){10,}?```"
CODE_KEYWORDS = (
    r"\bdef\s+\w+",
    r"\bclass\s+\w+",
    r"\bimport\s+[\w.]+",
    r"\bfunction\s+\w*\s*\(",
    r"\b(?:const|let|var)\s+\w+\s*=",
    r"\breturn\s+[\w(\[{\"'-]",
    r"\bif\s*\(",
    r"#include\s*<\w",
    r"\basync\s+\w+",
    r"\bawait\s+\w+",
    r"\blambda\b[^:\n]{0,40}:",
    r"\bfn\s+\w+",
    r"\bprintln!?\s*\(",
    r"\bconsole\.log\b",
    r"\b\w+\([^()\n]*\)\s*\{",  # name(...) {
    r"=>\s*\{",
    r"->\s*[A-Za-z_][\w\[\], ]*",  # -> Type
)

# Math: notation and vocabulary.
MATH_PATTERNS = (
    r"\$\$[^$]+\$\$|\$[^$\n]+\$",  # inline / display LaTeX
    r"\\(?:frac|sqrt|sum|int|prod|lim|alpha|beta|gamma|delta|theta|lambda|sigma|pi|infty|cdot|times|leq|geq|neq|partial)\b",
    r"[∑∫∏√∞≈≠≤≥±∂∇∈∉⊂⊆∪∩∀∃]",
    r"[αβγδεζηθικλμνξπρστυφχψωΔΣΩΠΘΛ]",
    r"[⁰¹²³⁴⁵⁶⁷⁸⁹₀₁₂₃₄₅₆₇₈₉]",
    r"[½⅓⅔¼¾⅕⅛]",
    r"\b\d+(?:\.\d+)?\s*[-+*/×÷^]\s*\d+(?:\.\d+)?\s*=\s*-?\d+(?:\.\d+)?",  # a op b = c
    r"\b\d+(?:\s*,\s*\d+){3,}",  # four or more comma-separated integers
    r"\b[a-z]\s*=\s*-\s*\d+",  # x = -3
    r"\b(?:equation|derivative|integral|theorem|lemma|proof|polynomial|matrix|vector|probability|logarithm)s?\b",
    r"(?:方程|导数|积分|定理|证明|函数|概率|矩阵|向量|求解|多项式|不等式)",
    r"[_^]\{[^{}\n]*\}",
)

# Complex logic: discourse markers (assistant messages only).
LOGIC_MARKERS = (
    r"首先.{0,200}?其次",
    r"如果.{0,100}?那么",
    r"因为.{0,100}?所以",
    r"综上",
    r"优缺点",
    r"\bfirstly\b",
    r"\bmoreover\b",
    r"\btherefore\b",
    r"\bif\b.{1,100}?\bthen\b",
    r"\bin\s+conclusion\b",
    r"\bpros\s+and\s+cons\b",
    r"\btrade-?offs?\b",
)

# User dissatisfaction with a previous answer.
DISSATISFACTION_EN = (
    r"\bwrong\b",
    r"\bredo\b",
    r"\bnonsense\b",
    r"\bnot\s+what\s+i\s+asked\b",
    r"\byou\s+misunderstood\b",
    r"\bwtf\b",
    r"\bcome\s+on\b",
    r"\bfrustrat\w*",
)
DISSATISFACTION_ZH = ("错了", "重新回答", "答非所问", "胡说", "浪费时间")

REASONING_MIN_CHARS = 200
