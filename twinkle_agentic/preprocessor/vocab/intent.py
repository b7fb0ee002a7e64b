"""IntentClassifier: what each detector counts. Every list is joined into one regex per detector.

Fragments use Python syntax restricted so that ``re2_batch.to_re2`` can translate them (no look-behind,
``(?=\\w)`` only after a non-word character, no ``\\w``/``\\s`` inside character classes). The
vocabularies, bounds and spacing rules were aligned with upstream by black-box probing.
"""

# Code: a fenced block with >= 10 characters inside counts at once; otherwise keyword hits.
# (Aligned with upstream by black-box probing: a keyword counts when one space and a word character
# follow it, the name itself is not consumed, and matching is case-sensitive.)
CODE_FENCE = "```"
CODE_FENCE_MIN_CHARS = 10
CODE_WORDS = (
    "def", "class", "import", "from", "function", "func", "fn", "const", "let", "var", "return",
    "async", "await", "lambda", "yield", "static", "void", "struct", "enum", "interface", "private",
    "protected", "final", "abstract", "package", "module", "namespace", "export", "switch", "case",
    "break", "continue", "catch", "throw", "throws",
)  # fmt: skip
CODE_KEYWORDS = (
    rf"\b(?:{'|'.join(CODE_WORDS)}) (?=\w)",  # a keyword followed by a name (one group: RE2's DFA stays small)
    r"\bprintln\b",
    r"\bconsole\.log\b",
    r"\bif \((?=\w)",
    r"#include\s*[<\"]",
    r"[A-Za-z_]\w*\([^()\n]*\)\s*\{",  # name(...) {
    r"=>\s*\{",
    r"->\s*[A-Za-z_](?:\w|[\[\], ])*",  # -> Type
)

# Math: notation and vocabulary, case-sensitive, in one alternation (so a notation hit, e.g. a
# ``$...$`` span, consumes what is inside it). Aligned with upstream by black-box probing.
MATH_SYMBOLS = (
    "∑∫∏√∞≈≠≤≥±∂∇∈⊂⊆⊃⊇∝≡≅×÷⇒⇔°αβγδεζηθικλμνξοπρστυφχψωΔΘΛΞΠΣΦΨΩ"
    "⁰¹²³⁴⁵⁶⁷⁸⁹₀₁₂₃₄₅₆₇₈₉½⅓⅔¼¾⅛⅜⅝⅞"
)
# LaTeX commands: a prefix is enough (\fracx counts, as upstream).
MATH_LATEX = (
    "frac", "sqrt", "sum", "int", "prod", "lim", "alpha", "beta", "gamma", "theta", "lambda", "mu",
    "pi", "sigma", "infty", "cdot", "times", "div", "leq", "geq", "neq", "approx", "equiv", "pm",
    "partial", "nabla", "mathbb", "mathrm", "overline", "rightarrow", "to",
)  # fmt: skip
MATH_WORDS_EN = (
    "equation", "derivative", "integral", "theorem", "lemma", "corollary", "axiom", "proof",
    "polynomial", "matrix", "vector", "eigenvector", "eigenvalue", "determinant", "gradient",
    "differential", "probability", "distribution", "expectation", "variance", "deviation", "mean",
    "median", "mode", "logarithm", "exponential", "factorial", "coefficient", "inequality",
    "multiply", "divide", "radius", "diameter", "circumference", "perimeter", "hypotenuse",
    "congruent", "sine", "cosine", "tangent", "cotangent", "secant", "cosecant", "arcsin", "arccos",
    "arctan", "sqrt", "subset", "union", "intersection",
)  # fmt: skip
MATH_WORDS_ZH = (
    "一元二次", "方程", "不等式", "多项式", "系数", "化简", "求解", "未知数", "导数", "偏导", "求导",
    "微分", "积分", "极限", "梯度", "映射", "矩阵", "行列式", "特征值", "向量", "法线", "概率",
    "期望", "方差", "标准差", "均值", "中位数", "众数", "分布", "随机变量", "集合", "子集", "空集",
    "交集", "并集", "等差数列", "等比数列", "等差", "等比", "数列", "通项", "阶乘", "整数", "实数",
    "有理数", "无理数", "小数", "分数", "百分比", "比例", "质数", "素数", "合数", "奇数", "偶数",
    "因数", "倍数", "余数", "约分", "通分", "最大公约数", "对数", "指数函数", "三角函数", "平方",
    "立方", "开方", "根号", "乘以", "除以", "正弦", "余弦", "正切", "余切", "切线", "渐近线",
    "抛物线", "双曲线", "椭圆", "坐标系", "直角", "锐角", "钝角", "平角", "弧度", "三角形",
    "四边形", "多边形", "正方形", "长方形", "梯形", "菱形", "对角线", "勾股", "圆柱", "圆锥",
    "球体", "半径", "直径", "周长", "面积", "体积",
)  # fmt: skip
MATH_PATTERNS = (
    r"\$\$[^$]+\$\$",  # display LaTeX
    r"\$[^$\n]+\$",  # inline LaTeX
    r"\\(?:" + "|".join(MATH_LATEX) + ")",
    r"\\subset\b",
    r"\d+\s*[-+*/×÷]\s*\d+\s*=\s*\d+",  # a op b = c
    r"\d+(?:\s*,\s*\d+){3}",  # four comma-separated integers
    r"[A-Za-z]\s*=\s*-?\d",  # x = -3, y=7
    r"\w[_^]\{[^}]+\}",  # x_{i}, x^{2}
    rf"\b(?:{'|'.join(MATH_WORDS_EN)})\b",
    *MATH_WORDS_ZH,
    f"[{MATH_SYMBOLS}]",
)

# Complex logic: discourse markers (assistant messages only; case-insensitive, "." matches newlines).
# Bounds and single spaces as upstream (probed); 首先…其次 is greedy and unbounded, as upstream.
LOGIC_WORDS_EN = (
    "first", "firstly", "second", "secondly", "third", "thirdly", "finally", "moreover",
    "furthermore", "therefore", "thus", "hence", "consequently", "accordingly", "overall",
    "in addition", "as a result", "on the other hand", "on the one hand", "on one hand",
    "in conclusion", "to conclude", "in summary", "to summarize", "all things considered",
    "pros and cons", "advantages and disadvantages", "trade-?offs?",
)  # fmt: skip
LOGIC_MARKERS = (
    r"首先.{4,}其次",
    r"如果.{1,29}[，,]\s*那么",
    r"因为.{1,38}[，,]\s*所以",
    r"由于.{2,40}因此",
    r"之所以.{2,30}是因为",
    "综上", "总而言之", "综合来看", "相比之下", "由此可见", "优缺点", "利弊", "权衡",
    rf"\b(?:{'|'.join(LOGIC_WORDS_EN)})\b",
    r"\bif .{5,30} then\b",
)

# User dissatisfaction with a previous answer (case-insensitive; single spaces as upstream).
DISSATISFACTION_WORDS_EN = (
    "wrong", "redo", "nonsense", "incorrect", "not right", "not correct", "not helpful", "unhelpful",
    "useless", "stupid", "terrible", "horrible", "awful", "garbage", "ridiculous", "annoying",
    "disappointed", "disappointing", "bad", "wtf", "what the hell", "what the fuck", "try again",
    "not what i asked", "not what i meant", "not what i wanted", "you misunderstood",
    "doesn't work", "does not work", "didn't work", "doesn't help",
)  # fmt: skip
DISSATISFACTION_EN = (
    rf"\b(?:{'|'.join(DISSATISFACTION_WORDS_EN)})\b",
    r"\bcome on",
    r"\bfrustrat\w+",
)
DISSATISFACTION_ZH = (
    "错了", "错误", "答错", "不对", "不正确", "答非所问", "胡说", "瞎说", "浪费时间", "重新", "重做",
    "重来", "再来一次", "没用", "垃圾", "不行", "什么鬼", "失望", "太差", "离谱", "不满意",
)  # fmt: skip

REASONING_MIN_CHARS = 200
