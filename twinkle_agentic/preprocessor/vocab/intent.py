"""IntentClassifier: what each detector counts. Every list is joined into one regex per detector.

Fragments start with a literal, ``\\b`` + a literal, or ``\\b`` + ``\\d``/``[a-z]``; the classifier
rewrites the leading ``\\b`` into a look-behind after the first character and expands leading classes,
so every alternative starts with a literal and the regex engine can skip to candidate characters.
Math and logic match lowercased text.
"""

# Code: a fenced block with >= 10 characters inside counts at once; otherwise keyword hits.
CODE_FENCE = r"```(?:(?!```).){10,}?```"
CODE_WORDS = (
    "def", "class", "import", "function", "const", "let", "var", "return", "async", "await", "fn",
    "static", "void", "struct",
)  # fmt: skip
CODE_KEYWORDS = (
    *(rf"\b{w}\s+\w" for w in CODE_WORDS),  # a keyword followed by a name
    r"\blambda\b",
    r"\bprintln\b",
    r"\bconsole\.log\b",
    r"\bif\s*\(",
    r"#include\s*[<\"]",
    r"\((?<=\w\()[^()\n]*\)\s*\{",  # name(...) {
    r"=>\s*\{",
    r"->\s*[A-Za-z_][\w\[\], ]*",  # -> Type
)

# Math: notation and vocabulary (matched against lowercased text); symbols are one character class.
MATH_SYMBOLS = "∑∫∏√∞≈≠≤≥±∂∇∈∉⊂⊆∪∩∀∃αβγδεζηθικλμνξπρστυφχψω⁰¹²³⁴⁵⁶⁷⁸⁹₀₁₂₃₄₅₆₇₈₉½⅓⅔¼¾⅕⅛"
MATH_WORDS_EN = (
    "equation", "derivative", "integral", "theorem", "lemma", "proof", "polynomial", "matrix",
    "vector", "probability", "logarithm",
)  # fmt: skip
MATH_WORDS_ZH = (
    "方程", "导数", "积分", "概率", "矩阵", "向量", "求解", "多项式", "不等式", "求导", "极限", "微分",
    "面积", "体积", "平方", "根号", "系数",
)  # fmt: skip
MATH_PATTERNS = (
    r"\$\$[^$]+\$\$",  # display LaTeX
    r"\$[^$\n]+\$",  # inline LaTeX
    r"\\(?:frac|sqrt|sum|int|prod|lim|alpha|beta|gamma|delta|theta|lambda|sigma|pi|infty|cdot|times|leq|geq|neq|partial)\b",
    r"\b\d+(?:\.\d+)?\s*[-+*/×÷^]\s*\d+(?:\.\d+)?\s*=\s*-?\d+(?:\.\d+)?",  # a op b = c
    r"\b\d+(?:\s*,\s*\d+){3,}",  # four or more comma-separated integers
    r"=(?<=\b[a-z]=)\s*-\s*\d+",  # x=-3 (anchored on "=": a letter-first branch would make every
    r"=(?<=\b[a-z] =)\s*-\s*\d+",  # letter a candidate); x = -3
    *(rf"\b{w}s?\b" for w in MATH_WORDS_EN),
    *MATH_WORDS_ZH,
    r"_\{[^{}\n]*\}",
    r"\^\{[^{}\n]*\}",
)

# Complex logic: discourse markers (assistant messages only; lowercased text).
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
