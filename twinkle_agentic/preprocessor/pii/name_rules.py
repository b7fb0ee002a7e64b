"""Names announced by a cue: "Dear Julia Wright,", ``"name": "Julia Wright"``, "收件人：喻亮".

spaCy's small English model misses many names in greetings, sign-offs and JSON tool output, and LAC
misses rare given names; a cue word right before a name-shaped string is strong evidence for both.
These recognizers run next to the NER models (only when NER is on: ``use_ner=False`` stays
pattern-only, as documented). The candidate must look like a name: capitalised words for English,
a known surname plus one or two characters for Chinese; titles and stop words are refused.
"""

from __future__ import annotations

import re

from .entities import SCORES
from .recognizers import RuleRecognizer
from .zh_ner import COMPOUND_SURNAMES, SINGLE_SURNAMES, trim_person

_EN_NAME = r"[A-Z][a-z]+(?:[-'’][A-Z]?[a-z]+)?(?:\s+[A-Z][a-z]+(?:[-'’][A-Z]?[a-z]+)?){0,2}"
EN_CUES = (
    r"(?:\b(?:Dear|Hi|Hello|Hey|Thanks|Thank\s+you|Attn\.?|Mr\.?|Mrs\.?|Ms\.?|Miss|Dr\.?|Prof\.?)\s*,?\s+"
    r"|\b(?i:name|full\s*name|contact|customer|patient|tenant|client|owner|recipient|holder)\s*[:=]\s*"
    r"|\"(?i:name|full_?name|first_?name|last_?name|customer(?:_name)?|owner|contact(?:_name)?|holder"
    r"|user_?name|recipient|patient|author|assignee)\"\s*:\s*\")"
)
EN_PATTERN = rf"{EN_CUES}(?P<name>{_EN_NAME})\b"
# Greeting words that are not names ("Dear Sir", "Hi Team", "Thanks Again").
EN_NOT_NAMES = frozenset(
    w.casefold()
    for w in ("Sir", "Madam", "Team", "All", "Everyone", "There", "Again", "World", "Customer", "User", "Users",
              "Support", "Friend", "Friends", "Guys", "Folks", "Both", "So", "Much", "You", "For", "Everybody",
              "Colleagues", "Sirs", "Admin", "Bot", "Assistant", "Reviewer", "Reviewers", "Hiring", "Manager")
)

_SURNAME = "(?:" + "|".join(sorted(COMPOUND_SURNAMES)) + "|[" + "".join(sorted(SINGLE_SURNAMES)) + "])"
ZH_CUES = (
    r"(?:收件人|联系人|持卡人|户名|收货人|签收人|寄件人|姓名|客户|用户|负责人|下单人|申请人|管理员是?|联系|致电|"
    r"你好|您好|亲爱的|尊敬的|我叫|我是|名叫|名字叫)[：:\s]*"
)
_ZH_AFTER = r"(?=[，。、；;,.!！?？\s）)」\"'：:]|先生|女士|小姐|的|和|与|是|$)"
ZH_PATTERN = rf"(?:{ZH_CUES}(?P<cued>{_SURNAME}[\u4e00-\u9fff]{{1,2}}){_ZH_AFTER}" rf"|(?P<titled>{_SURNAME}[\u4e00-\u9fff]{{1,2}})(?=先生|女士|小姐))"


class EnglishNameCueRecognizer(RuleRecognizer):
    ENTITY = "PERSON"
    PATTERN = EN_PATTERN

    def span(self, text: str, match: re.Match) -> tuple[int, int]:
        return match.span("name")

    def score(self, text: str, match: re.Match) -> float | None:
        from .en_ner import NOT_NAMES_EN

        words = match.group("name").split()
        if words[0].casefold() in EN_NOT_NAMES or match.group("name").casefold() in NOT_NAMES_EN:
            return None
        return SCORES["NAME_CUE"]


class ChineseNameCueRecognizer(RuleRecognizer):
    ENTITY = "PERSON"
    PATTERN = ZH_PATTERN

    def span(self, text: str, match: re.Match) -> tuple[int, int]:
        return match.span("cued") if match.group("cued") else match.span("titled")

    def score(self, text: str, match: re.Match) -> float | None:
        name = match.group("cued") or match.group("titled")
        return SCORES["NAME_CUE"] if trim_person(name) == name else None


NAME_CUE_RECOGNIZERS = (EnglishNameCueRecognizer, ChineseNameCueRecognizer)
