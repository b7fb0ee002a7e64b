"""Vetting English NER spans: spaCy's small model tags code, tech words, imperatives and sentence
openers as people or places. ``clean_english_ner`` trims or drops such PERSON/LOCATION spans."""

from __future__ import annotations

import re
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from .analyzer import Span

_UPPER = re.compile(r"[A-Z]")
_CJK = re.compile(r"[\u4e00-\u9fff]")

# English NER spans that are code or tech vocabulary rather than people or places.
_CODE_CHARS = re.compile(r"[\d_/\\=<>{}\[\]()@#$%^&*|`~+]")
_CAMEL = re.compile(r"^[A-Z]?[a-z]+[A-Z]")
NOT_NAMES_EN = frozenset(
    w.casefold()
    for w in (
        "Python", "Java", "JavaScript", "Rust", "Go", "Ruby", "Perl", "Scala", "Kotlin", "Swift", "Docker",
        "Kubernetes", "Redis", "Kafka", "Spark", "Hadoop", "Django", "Flask", "React", "Vue", "Angular",
        "Node", "Linux", "Ubuntu", "Debian", "Windows", "macOS", "Git", "GitHub", "GitLab", "Jenkins",
        "Terraform", "Ansible", "Nginx", "Apache", "Postgres", "PostgreSQL", "MySQL", "MongoDB", "SQLite",
        "Elasticsearch", "Grafana", "Prometheus", "Jupyter", "NumPy", "Pandas", "PyTorch", "TensorFlow",
        "Keras", "Ray", "vLLM", "OpenAI", "ChatGPT", "Claude", "Gemini", "Llama", "Qwen", "Mistral",
        "Bert", "Transformer", "Transformers", "Hugging Face", "HuggingFace", "AWS", "Azure", "GCP",
        "Lambda", "Celery", "Airflow", "Bash", "Zsh", "Vim", "Emacs", "Slack", "Zoom", "Jira", "Confluence",
        "Markdown", "JSON", "YAML", "TOML", "HTML", "CSS", "SQL", "API", "REST", "GraphQL", "gRPC", "UUID",
        "SHA", "SHA-256", "MD5", "Base64", "Unicode", "UTF-8", "ASCII", "Regex", "Lorem Ipsum", "Hello World",
        "Thanks", "Thank", "Hi", "Hello", "Hey", "Dear", "Regards", "Cheers", "Best", "Sincerely",
        "Gateway", "Router", "Server", "Fourier", "Bayes", "Bayesian", "Gaussian", "Euler", "Newton", "Turing",
        "Markov", "Laplace", "Dijkstra", "Kalman", "Hessian", "Jacobian", "Boolean", "Lorem", "Ipsum",
        # imperatives and kinship words spaCy's small model sometimes tags as a person
        "Email", "Call", "Text", "Send", "Write", "Ping", "Message", "Contact", "Reply", "Forward", "Ship",
        "Charge", "Wire", "Transfer", "Refund", "Book", "Grandma", "Grandpa", "Mom", "Dad", "Mum", "Uncle",
        "Aunt", "Auntie", "Sis", "Bro",
    )
)

# Capitalised sentence openers spaCy glues to the front of a name ("Sure John Smith", "Dear Ann").
LEADING_NOT_NAME = frozenset(
    ("sure", "thanks", "thank", "hi", "hello", "hey", "dear", "yes", "no", "ok", "okay", "please", "well",
     "so", "and", "but", "sorry", "welcome", "bye", "goodbye", "congrats", "congratulations", "cheers",
     "regards", "ask", "tell", "call", "email", "contact", "meet", "cc", "from", "to", "by", "with", "for",
     "customer", "patient", "tenant", "client", "user", "reimburse", "ping", "grandma", "grandpa", "uncle",
     "aunt", "mr", "mrs", "ms", "miss", "dr", "prof", "sir", "madam", "attn", "dear")
)
_FIRST_WORD = re.compile(r"([^\W\d_][\w'’.-]*)\s+")


def clean_english_ner(text: str, span: Span) -> Span | None:
    """Trim and vet an English NER PERSON/LOCATION span; None drops it.

    A span must contain a capital letter (this is also what makes the capital-letter trigger
    exact), must not look like code, a camelCase identifier or a known tech word."""
    start, end = span.start, span.end
    while start < end and not text[start].isalnum():
        start += 1
    while end > start and not text[end - 1].isalnum():
        end -= 1
    while True:
        first = _FIRST_WORD.match(text, start, end)
        if first is None or first.group(1).rstrip(".,").casefold() not in LEADING_NOT_NAME:
            break
        start = first.end()
    word = text[start:end]
    for tail in ("'s", "’s"):
        if word.endswith(tail):
            end -= len(tail)
            word = word[: -len(tail)]
    if not _UPPER.search(word) or _CJK.search(word) or _CODE_CHARS.search(word):
        return None
    if word.casefold() in NOT_NAMES_EN:
        return None
    if " " not in word and _CAMEL.match(word):
        return None
    if span.entity == "PERSON" and word.isupper() and len(word) <= 5:
        return None
    return type(span)(span.entity, start, end, span.score)
