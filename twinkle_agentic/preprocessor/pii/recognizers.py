"""Presidio recognizers for Chinese identifiers, addresses, offline e-mail and formatted phones.

Each rule recognizer is a regex plus a ``score(text, match)`` that validates the match (checksums,
dates) and returns a score, or None to reject it. Context cue words are applied afterwards by the
analyzer for every recognizer alike (see entities.CONTEXT_CUES), so none is applied here.
This module imports Presidio: import it only where the optional stack is wanted.
"""

from __future__ import annotations

import ipaddress
import re
from collections.abc import Iterable

from presidio_analyzer import LocalRecognizer, RecognizerResult
from presidio_analyzer.predefined_recognizers import (
    CreditCardRecognizer,
    IbanRecognizer,
    PhoneRecognizer,
    UrlRecognizer,
    UsSsnRecognizer,
)

from .checksums import cn_id_checksum_ok, cn_id_date_ok, luhn_ok
from .entities import SCORES

_NOT_ALNUM_BEFORE = r"(?<![0-9A-Za-z])"
_NOT_ALNUM_AFTER = r"(?![0-9A-Za-z])"

CN_ID_PATTERN = _NOT_ALNUM_BEFORE + r"\d{17}[\dXx]" + _NOT_ALNUM_AFTER
CN_PHONE_PATTERN = (
    _NOT_ALNUM_BEFORE + r"(?:\(?(?:\+|00)?86\)?[ -]?)?1[3-9]\d([ -]?)\d{4}\1\d{4}" + r"(?!\d)"
)
CN_LANDLINE_PATTERN = (
    _NOT_ALNUM_BEFORE + r"(?:\(0[1-9]\d{1,2}\)|0[1-9]\d{1,2})[ -]?[1-9]\d{2,3}[ -]?\d{4}" + _NOT_ALNUM_AFTER
)
CN_BANK_PATTERN = (
    r"(?<![0-9A-Za-z.])(?:\d{13,19}|\d{4}([ -])\d{4}(?:\1\d{4}){1,2}(?:\1\d{1,3})?|\d{4}([ -])\d{6}\2\d{4,5})"
    r"(?![0-9A-Za-z]|\.\d)"
)

_CJK = "\u4e00-\u9fff"
CN_ADMIN_SUFFIXES = ("特别行政区", "自治区", "自治州", "自治县", "省", "市", "地区", "盟", "州", "区", "县",
                     "旗", "镇", "乡", "街道", "村", "社区")
CN_ROAD_SUFFIXES = ("大道", "大街", "胡同", "路", "街", "巷", "道", "弄", "里")
CN_UNIT_SUFFIXES = ("号楼", "号院", "栋", "幢", "座", "单元", "层", "楼", "室", "户", "号")
_CN_NUMBER = r"[0-9０-９一二三四五六七八九十百零〇]+"
_CN_PLACE_TOKEN = "(?:" + "|".join(CN_ADMIN_SUFFIXES + CN_ROAD_SUFFIXES) + ")"
CN_ADDRESS_PATTERN = (
    rf"(?:[{_CJK}]{{1,7}}?{_CN_PLACE_TOKEN}){{2,}}(?:{_CN_NUMBER}段)?\s*{_CN_NUMBER}(?:[-－]{_CN_NUMBER})?号"
    rf"(?:\s*(?:[A-Za-z{_CJK}]{{1,12}}?)?[0-9０-９A-Za-z一二三四五六七八九十]+(?:{'|'.join(CN_UNIT_SUFFIXES)}))*"
)
# Words and characters that end a sentence's lead-in before an address ("我住在", "寄到", "地址：").
CN_ADDRESS_LEAD_CUES = re.compile(
    r"住址|地址|位于|住在|寄到|送到|发到|寄往|搬到|来自|[在是于到为往去来至寄送发住搬我你他她们的了和与及从:：,，、。\s]"
)

STREET_SUFFIXES = (
    "Street", "Avenue", "Road", "Boulevard", "Lane", "Drive", "Way", "Court", "Place", "Terrace", "Parkway",
    "Circle", "Highway", "Square", "Trail", "Alley", "Plaza", "Crescent", "Close", "Loop",
)
# Abbreviations take a following dot unless it ends the sentence ("at 9 Elm St. Then ...").
STREET_ABBREVIATIONS = ("St", "Ave", "Rd", "Blvd", "Ln", "Dr", "Ct", "Pl", "Ter", "Pkwy", "Cir", "Hwy", "Sq", "Trl")
STREET_UNITS = ("Apt", "Apartment", "Suite", "Ste", "Unit", "Floor", "Fl", "Room", "Rm", "#")
_STREET_WORD = r"(?:[A-Z][a-zA-Z'’-]*\.?|\d{1,3}(?:st|nd|rd|th))"
STREET_ADDRESS_PATTERN = (
    r"\b\d{1,6}[A-Za-z]?\s+(?:(?:N|S|E|W|North|South|East|West)\.?\s+)?"
    rf"(?:{_STREET_WORD}\s+){{1,4}}?(?:(?:{'|'.join(STREET_SUFFIXES)})\b"
    rf"|(?:{'|'.join(STREET_ABBREVIATIONS)})\b(?:\.(?!\s*$|\s+[A-Z]))?)"
    r"(?:\s+(?:N|S|E|W|NE|NW|SE|SW)\b\.?)?"
    rf"(?:,?\s+(?:{'|'.join(u for u in STREET_UNITS if u != '#')})\b\.?\s*#?\s*[A-Za-z0-9-]+|,?\s+#\s*[A-Za-z0-9-]+)?"
)

EMAIL_PATTERN = (
    r"(?<![A-Za-z0-9._%+-])[A-Za-z0-9._%+-]+@[A-Za-z0-9](?:[A-Za-z0-9-]{0,61}[A-Za-z0-9])?"
    r"(?:\.[A-Za-z0-9](?:[A-Za-z0-9-]{0,61}[A-Za-z0-9])?)*\.[A-Za-z]{2,24}(?![A-Za-z0-9-])"
)


class RuleRecognizer(LocalRecognizer):
    """A regex recognizer whose ``score`` validates each match; subclasses set ENTITY and PATTERN."""

    ENTITY = ""
    PATTERN = ""
    FLAGS = 0

    def __init__(self, supported_language: str = "en") -> None:
        self._regex = re.compile(self.PATTERN, self.FLAGS)
        super().__init__(
            supported_entities=[self.ENTITY], supported_language=supported_language, name=type(self).__name__
        )

    def load(self) -> None:
        pass

    def score(self, text: str, match: re.Match) -> float | None:
        raise NotImplementedError

    def span(self, text: str, match: re.Match) -> tuple[int, int]:
        return match.span()

    def analyze(self, text: str, entities: list[str], nlp_artifacts=None) -> list[RecognizerResult]:
        if self.ENTITY not in entities:
            return []
        results = []
        for match in self._regex.finditer(text):
            score = self.score(text, match)
            if score is None:
                continue
            start, end = self.span(text, match)
            results.append(
                RecognizerResult(
                    self.ENTITY,
                    start,
                    end,
                    score,
                    recognition_metadata={
                        RecognizerResult.RECOGNIZER_NAME_KEY: self.name,
                        RecognizerResult.RECOGNIZER_IDENTIFIER_KEY: self.id,
                    },
                )
            )
        return results


class CnIdRecognizer(RuleRecognizer):
    """Resident ID: 17 digits + check character; a bad checksum is never reported, an impossible
    birth date is reported below the default threshold (a cue such as 身份证 lifts it)."""

    ENTITY = "CN_ID"
    PATTERN = CN_ID_PATTERN

    def score(self, text: str, match: re.Match) -> float | None:
        value = match.group()
        if not cn_id_checksum_ok(value):
            return None
        plausible = value[0] in "12345678" and cn_id_date_ok(value)
        return SCORES["CN_ID"] if plausible else SCORES["CN_ID_BAD_DATE"]


class CnPhoneRecognizer(RuleRecognizer):
    ENTITY = "CN_PHONE"
    PATTERN = CN_PHONE_PATTERN

    def score(self, text: str, match: re.Match) -> float | None:
        return SCORES["CN_PHONE"]


class CnLandlineRecognizer(RuleRecognizer):
    ENTITY = "CN_LANDLINE"
    PATTERN = CN_LANDLINE_PATTERN

    def score(self, text: str, match: re.Match) -> float | None:
        return SCORES["CN_LANDLINE"]


class CnBankRecognizer(RuleRecognizer):
    """13-19 digit card numbers passing Luhn; weak on its own (a cue word or UnionPay prefix helps).
    Loses to an overlapping valid CN_ID (the analyzer enforces that)."""

    ENTITY = "CN_BANK"
    PATTERN = CN_BANK_PATTERN

    def score(self, text: str, match: re.Match) -> float | None:
        digits = re.sub(r"\D", "", match.group())
        if not 13 <= len(digits) <= 19 or not luhn_ok(digits):
            return None
        if digits.startswith("62") and len(digits) >= 16:
            return SCORES["CN_BANK_UNIONPAY"]
        return SCORES["CN_BANK"]


class CnAddressRecognizer(RuleRecognizer):
    """A run of >= 2 administrative or road units ending in a house number + 号 (+ building parts)."""

    ENTITY = "CN_ADDRESS"
    PATTERN = CN_ADDRESS_PATTERN
    _FIRST_PLACE_TOKEN = re.compile(_CN_PLACE_TOKEN)
    # 省/市 close a province or city name; 州 inside 贵州 or 杭州 does not.
    _STRONG_PLACE_TOKEN = re.compile("特别行政区|自治区|省|市")

    def score(self, text: str, match: re.Match) -> float | None:
        return SCORES["CN_ADDRESS"]

    def span(self, text: str, match: re.Match) -> tuple[int, int]:
        """Drop a sentence lead-in ("我住在", "寄到") glued to the first unit, keeping >= 2 characters."""
        start, end = match.span()
        first = self._STRONG_PLACE_TOKEN.search(text, start, min(end, start + 12))
        first = first or self._FIRST_PLACE_TOKEN.search(text, start, end)
        if first is None:
            return start, end
        cut = start
        for cue in CN_ADDRESS_LEAD_CUES.finditer(text, start, first.start()):
            if first.start() - cue.end() >= 2:
                cut = cue.end()
        return cut, end


class StreetAddressRecognizer(RuleRecognizer):
    """House number, 1-4 capitalised words, a street suffix, an optional direction and unit."""

    ENTITY = "STREET_ADDRESS"
    PATTERN = STREET_ADDRESS_PATTERN

    def score(self, text: str, match: re.Match) -> float | None:
        return SCORES["STREET_ADDRESS"]


class OfflineEmailRecognizer(RuleRecognizer):
    """E-mail with an ASCII regex and a public-suffix check against tldextract's bundled snapshot.

    Presidio's own recognizer calls ``tldextract.extract``, which downloads the suffix list on first
    use; this one builds ``TLDExtract(suffix_list_urls=(), cache_dir=None)`` so it never touches the
    network. File names such as ``icon@2x.png`` fail the suffix check.
    """

    ENTITY = "EMAIL_ADDRESS"
    PATTERN = EMAIL_PATTERN
    _extract = None

    @classmethod
    def _extractor(cls):
        if cls._extract is None:
            import tldextract

            cls._extract = tldextract.TLDExtract(
                cache_dir=None, suffix_list_urls=(), fallback_to_snapshot=True
            )
        return cls._extract

    def load(self) -> None:
        self._extractor()

    def score(self, text: str, match: re.Match) -> float | None:
        parts = self._extractor()(match.group().rpartition("@")[2])
        if not parts.suffix or not parts.domain:
            return None
        return SCORES["EMAIL_ADDRESS"]


class FormattedPhoneRecognizer(PhoneRecognizer):
    """Presidio's phonenumbers-based recognizer, tuned for chat text.

    A number written the way people write phone numbers ("+44 20 7946 0958", "(212) 555-0199",
    "212.555.0199") scores above the default threshold without a cue word; a bare digit run or a
    single separator ("2023-000481", "2.718281828") keeps Presidio's 0.4 and needs a cue. The US
    SSN layout 3-2-4 is never a phone. "number" is dropped from the context words: it made
    "social security number" a phone cue."""

    CONTEXT = ["phone", "telephone", "tel", "cell", "cellphone", "mobile", "call", "fax"]
    _FORMATTED = re.compile(r"^(?:\+|\(\d{2,4}\)\s?\d{3,4}[\s.-]?\d{3,4}$|\d{2,4}([\s.-])\d{3,4}\1\d{3,4}$)")
    _SSN_LAYOUT = re.compile(r"^\d{3}[- ]\d{2}[- ]\d{4}$")

    def __init__(self, *args, **kwargs) -> None:
        super().__init__(*args, **kwargs)
        from phonenumbers import PhoneMetadata

        # No valid number of these regions has fewer digits: texts with fewer skip the matcher,
        # which parses every candidate once per region.
        lengths = [
            n
            for region in self.supported_regions
            if (meta := PhoneMetadata.metadata_for_region(region)) is not None
            for n in meta.general_desc.possible_length
            if n > 0
        ]
        self.min_digits = min(lengths, default=1)

    def analyze(self, text, entities, nlp_artifacts=None):
        if sum(ch.isdigit() for ch in text) < self.min_digits:
            return []
        results = super().analyze(text, entities, nlp_artifacts)
        return [r for r in results if not self._SSN_LAYOUT.match(text[r.start : r.end])]

    def _get_recognizer_result(self, match, text, region, nlp_artifacts):
        result = super()._get_recognizer_result(match, text, region, nlp_artifacts)
        if self._FORMATTED.match(text[match.start : match.end]):
            result.score = max(result.score, SCORES["PHONE_FORMATTED"])
        return result


class OfflineIpRecognizer(RuleRecognizer):
    """IPv4/IPv6 validated by ``ipaddress``. Presidio's regex needs word boundaries, which CJK text
    glued to an address ("服务器10.0.0.1的") does not have; here only ASCII alphanumerics and dots
    may not touch the address."""

    ENTITY = "IP_ADDRESS"
    PATTERN = (
        r"(?<![0-9A-Za-z.:])(?:(?:\d{1,3}\.){3}\d{1,3}|[0-9A-Fa-f]{0,4}(?::[0-9A-Fa-f]{0,4}){2,7}"
        r"(?:(?<=:)(?:\d{1,3}\.){3}\d{1,3})?)(?![0-9A-Za-z:]|\.\d)"
    )

    def score(self, text: str, match: re.Match) -> float | None:
        value = match.group()
        if len(value) < 3 or value.strip(":") == "":
            return None
        try:
            ipaddress.ip_address(value)
        except ValueError:
            return None
        return SCORES["IP_ADDRESS"]


RULE_RECOGNIZERS: dict[str, type[RuleRecognizer]] = {
    "CN_ID": CnIdRecognizer,
    "CN_PHONE": CnPhoneRecognizer,
    "CN_LANDLINE": CnLandlineRecognizer,
    "CN_BANK": CnBankRecognizer,
    "CN_ADDRESS": CnAddressRecognizer,
    "STREET_ADDRESS": StreetAddressRecognizer,
    "EMAIL_ADDRESS": OfflineEmailRecognizer,
    "IP_ADDRESS": OfflineIpRecognizer,
}
PRESIDIO_RECOGNIZERS = {
    "PHONE_NUMBER": FormattedPhoneRecognizer,
    "CREDIT_CARD": CreditCardRecognizer,
    "IBAN_CODE": IbanRecognizer,
    "US_SSN": UsSsnRecognizer,
    "URL": UrlRecognizer,
}


def pattern_recognizers(language: str, entities: Iterable[str]) -> list:
    """One recognizer per requested pattern entity, registered for ``language``."""
    out = []
    for entity in entities:
        if entity in RULE_RECOGNIZERS:
            out.append(RULE_RECOGNIZERS[entity](supported_language=language))
        elif entity in PRESIDIO_RECOGNIZERS:
            out.append(PRESIDIO_RECOGNIZERS[entity](supported_language=language))
    return out

