"""MessageNormalizer: heartbeat markers and the tags a Cline-style tool call can never use."""

HEARTBEAT_USER = r"heartbeat|keep.?alive"
HEARTBEAT_ASSISTANT = r"heartbeat"
HEARTBEAT_HEAD_CHARS = 300
# Literal gates on the lowercased head: a head matching HEARTBEAT_USER holds every word of one group
# (HEARTBEAT_ASSISTANT: of the first group). Rows whose heads pass no gate skip the regexes.
HEARTBEAT_GATES = (("heartbeat",), ("keep", "alive"))

# Outer tags that are markup, roles or reasoning, never a Cline tool name.
CLINE_DENY_TAGS = frozenset(
    {
        "think", "thinking", "answer", "tool_call", "tool_response", "function", "parameter",
        "parameters", "tool", "tools", "system", "user", "assistant", "message", "messages", "content",
        "response", "output", "role", "reasoning_content",
        # HTML
        "a", "abbr", "b", "blockquote", "body", "br", "button", "caption", "cite", "code", "col",
        "dd", "del", "details", "div", "dl", "dt", "em", "figcaption", "figure", "footer", "form",
        "h1", "h2", "h3", "h4", "h5", "h6", "head", "header", "hr", "html", "i", "iframe", "img",
        "input", "ins", "kbd", "label", "li", "link", "main", "mark", "meta", "nav", "ol", "option",
        "p", "pre", "q", "s", "samp", "script", "section", "select", "small", "source", "span",
        "strong", "style", "sub", "summary", "sup", "table", "tbody", "td", "textarea", "tfoot", "th",
        "thead", "title", "tr", "u", "ul", "var", "video", "audio", "svg",
    }
)  # fmt: skip
