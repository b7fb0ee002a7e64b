"""Entity vocabularies of the PII filter: names, defaults, families, scores and context cues.

Everything here is data. Recognizers, the analyzer and the replacement code read these tables so a
rule (a minimum length, a cue word, which entities are numeric) lives in exactly one place.
"""

from __future__ import annotations

DEFAULT_ENTITIES: tuple[str, ...] = (
    "PERSON",
    "LOCATION",
    "STREET_ADDRESS",
    "CN_ADDRESS",
    "EMAIL_ADDRESS",
    "PHONE_NUMBER",
    "CN_PHONE",
    "CN_LANDLINE",
    "CN_ID",
    "CN_BANK",
    "CREDIT_CARD",
    "IBAN_CODE",
    "IP_ADDRESS",
    "US_SSN",
)
# Detected only when listed explicitly in ``entities`` (spaCy labels ORG, NORP, DATE/TIME; Presidio URL).
OPTIONAL_ENTITIES: tuple[str, ...] = ("ORGANIZATION", "NRP", "DATE_TIME", "URL")
KNOWN_ENTITIES: frozenset[str] = frozenset(DEFAULT_ENTITIES + OPTIONAL_ENTITIES)

# Entities that come from a statistical NER model (spaCy for English, LAC for Chinese).
NER_ENTITIES: frozenset[str] = frozenset({"PERSON", "LOCATION", "ORGANIZATION", "NRP", "DATE_TIME"})

# spaCy label -> entity. Labels not listed are ignored.
SPACY_LABELS: dict[str, str] = {
    "PERSON": "PERSON",
    "GPE": "LOCATION",
    "LOC": "LOCATION",
    "FAC": "LOCATION",
    "ORG": "ORGANIZATION",
    "NORP": "NRP",
    "DATE": "DATE_TIME",
    "TIME": "DATE_TIME",
}
# LAC (Chinese lexical analysis) label -> entity.
LAC_LABELS: dict[str, str] = {"PER": "PERSON", "LOC": "LOCATION", "ORG": "ORGANIZATION", "TIME": "DATE_TIME"}

MIN_SPAN_LENGTH: dict[str, int] = {"EMAIL_ADDRESS": 5, "PERSON": 2}
DEFAULT_MIN_SPAN_LENGTH = 3
# A text is Chinese (locale zh_CN, spaCy "zh") when more than this share of it is CJK.
ZH_TEXT_CJK_RATIO = 0.15
# Chinese places are often two characters (北京, 上海), like two-character names.
MIN_CJK_SPAN_LENGTH: dict[str, int] = {"LOCATION": 2}

# Values normalised to their digits (plus a trailing X for CN_ID) before seeding and marking.
DIGIT_ENTITIES: frozenset[str] = frozenset(
    {"PHONE_NUMBER", "CN_PHONE", "CN_LANDLINE", "CN_ID", "CN_BANK", "CREDIT_CARD", "US_SSN"}
)
PHONE_ENTITIES: frozenset[str] = frozenset({"PHONE_NUMBER", "CN_PHONE", "CN_LANDLINE"})
CARD_ENTITIES: frozenset[str] = frozenset({"CREDIT_CARD", "CN_BANK"})
# Free-text entities whose replacements carry the keyed text mark (see marks.py).
TEXT_ENTITIES: frozenset[str] = frozenset({"PERSON", "LOCATION", "STREET_ADDRESS", "CN_ADDRESS"})

STRATEGIES: tuple[str, ...] = ("mask", "replace", "redact", "hash")

# Scores of the project's own recognizers (Presidio's keep theirs).
SCORES: dict[str, float] = {
    "CN_ID": 0.85,
    "CN_ID_BAD_DATE": 0.4,  # checksum passes but the birth date is impossible: needs a cue word
    "CN_PHONE": 0.85,
    "CN_LANDLINE": 0.7,
    "CN_BANK": 0.4,
    "CN_BANK_UNIONPAY": 0.55,  # 62-prefixed, 16-19 digits
    "CN_ADDRESS": 0.9,
    "STREET_ADDRESS": 0.9,
    "EMAIL_ADDRESS": 1.0,
    "PHONE_FORMATTED": 0.6,
    "IP_ADDRESS": 0.6,
    "NAME_CUE": 0.75,  # a name right after a cue ("Dear ...", "收件人：...")  # a phonenumbers match written with '+' or grouping separators
    "NER": 0.85,
    "ZH_PERSON_SURNAME": 0.85,  # LAC person whose first character is a known surname
    "ZH_PERSON_OTHER": 0.55,
    "ZH_LOCATION": 0.75,
}
CONTEXT_BOOST = 0.35
CONTEXT_WINDOW_CHARS = 24

# Cue words looked up (case-insensitively, as substrings) in the characters just before a match.
# They work for Chinese too, where Presidio's token-lemma context cannot (spaCy's zh tokens are chars).
CONTEXT_CUES: dict[str, tuple[str, ...]] = {
    "PHONE_NUMBER": ("phone", "tel", "call", "mobile", "cell", "fax", "whatsapp", "电话", "手机", "联系", "致电", "号码"),
    "CN_PHONE": ("phone", "mobile", "tel", "电话", "手机", "联系", "号码", "微信"),
    "CN_LANDLINE": ("phone", "tel", "fax", "电话", "座机", "传真", "总机", "热线", "联系"),
    "CN_ID": ("身份证", "证件", "id card", "identity", "公民身份"),
    "CN_BANK": ("卡号", "银行卡", "储蓄卡", "借记卡", "信用卡", "账号", "帐号", "账户", "帐户", "收款", "转账",
                "card", "account", "acct", "visa", "mastercard", "amex"),
    "CREDIT_CARD": ("card", "visa", "mastercard", "amex", "卡号", "信用卡"),
    "US_SSN": ("ssn", "social security", "社会安全号"),
    "IBAN_CODE": ("iban", "bank", "account", "transfer"),
    "IP_ADDRESS": ("ip", "host", "server", "address", "地址", "服务器"),
}
# Patterns that veto a match when they end right before it (version strings look like IPv4
# addresses; order and ticket numbers can parse as phone numbers). Matched case-insensitively.
NEGATIVE_CUES: dict[str, str] = {
    "IP_ADDRESS": r"(?:\bv|\bversion\s*|\bver\.?\s*|版本号?\s*[:：]?\s*|\brelease\s*|\bbuild\s*)$",
    "PHONE_NUMBER": r"(?:order|invoice|ticket|tracking|sku|isbn|build|订单|工单|单号|快递)\s*(?:no\.?|number|id|#|号|编号)?\s*[:：#]?\s*$",
}
