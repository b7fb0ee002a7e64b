"""Seeded Faker replacements: deterministic across processes, locale-matched, shape-keeping, marked.

``FakeMaker.make(entity, original, norm, locale, attempt)`` reseeds the locale's Faker instance with
the first 8 bytes (big-endian) of SHA-256(salt 0x00 entity 0x00 normalised-original [0x00 attempt])
and draws. The same inputs give the same fake on any machine. Numeric values come back as
normalised characters; ``render`` pours them into each occurrence's own layout ("138-1234-5678").
Every fake carries the mark defined in marks.py.
"""

from __future__ import annotations

import hashlib
import ipaddress
import re
import string
import threading
from functools import lru_cache

from . import marks
from .checksums import cn_id_check_char, iban_check_digits, luhn_check_digit
from .entities import CARD_ENTITIES, DIGIT_ENTITIES, PHONE_ENTITIES

LOCALES = ("en_US", "zh_CN")
EMAIL_DOMAINS = ("example.com", "example.net", "example.org")
STREET_WORDS = ("Street", "Avenue", "Road", "Lane", "Drive", "Way", "Court", "Place", "Boulevard", "Terrace")
ZH_ROAD_SUFFIXES = ("路", "街", "大道")
_STREET_UNIT = re.compile(r"\b(?:Apt|Apartment|Suite|Ste|Unit|Floor|Fl|Room|Rm)\b|#", re.IGNORECASE)
_CN_UNIT = re.compile(r"号.*(?:栋|幢|座|单元|层|楼|室|户)")
_CJK = re.compile(r"[\u4e00-\u9fff]")
_CN_AREA = re.compile(r"\s*\(?(0\d{2,3})(?:\)|[ -])")
# Redraws of the free tokens when no candidate completes the mark (expected: a few dozen at most).
_MAX_TEXT_TRIES = 20000
_SLOT = "\x00"
_HOUSE_NUMBERS = tuple(str(i) for i in range(1, 10000))

_fakers: dict[str, object] = {}
_pool_names: set[str] = set()


def _pool(name: str, build) -> str:
    """Register the candidate pool ``name`` (built once per process) and return its name."""
    if name not in _pool_names:
        marks.register_pool(name, build())
        _pool_names.add(name)
    return name

_faker_lock = threading.Lock()


def faker_for(locale: str):
    """The process's one Faker instance for ``locale`` (created on first use)."""
    fake = _fakers.get(locale)
    if fake is None:
        from faker import Faker

        fake = _fakers.setdefault(locale, Faker(locale))
    return fake


def seed_of(salt: str, entity: str, norm: str, attempt: int = 0) -> int:
    payload = salt.encode() + b"\x00" + entity.encode() + b"\x00" + norm.encode()
    if attempt:
        payload += b"\x00" + str(attempt).encode()
    return int.from_bytes(hashlib.sha256(payload).digest()[:8], "big")


def normalise(entity: str, value: str) -> str:
    """Phones and IDs keep only digits (and a CN_ID's X); e-mails are case-folded; IBANs compacted;
    everything else is stripped."""
    if entity in DIGIT_ENTITIES:
        digits = re.sub(r"\D", "", value)
        if entity == "CN_ID" and value.rstrip()[-1:] in ("X", "x"):
            digits += "X"
        return digits
    if entity == "EMAIL_ADDRESS":
        return value.strip().casefold()
    if entity == "IBAN_CODE":
        return re.sub(r"[^0-9A-Za-z]", "", value).upper()
    return value.strip()


def render(entity: str, original: str, fake_norm: str) -> str:
    """Write a normalised fake in the layout of ``original`` (separators, grouping, case)."""
    if entity in DIGIT_ENTITIES or entity == "IBAN_CODE":
        chars = iter(fake_norm)
        out = []
        for ch in original:
            if ch.isascii() and ch.isalnum():
                new = next(chars, ch)
                out.append(new.lower() if ch.islower() else new)
            else:
                out.append(ch)
        return "".join(out)
    return fake_norm


def _digits(rnd, n: int, first: str = string.digits) -> str:
    if n <= 0:
        return ""
    return rnd.choice(first) + "".join(rnd.choice(string.digits) for _ in range(n - 1))


def _fit(rnd, source: str, n: int) -> str:
    """``source`` cut or left-padded with random digits to exactly n digits."""
    return source[-n:] if len(source) >= n else _digits(rnd, n - len(source), "123456789") + source


def phone_prefix(entity: str, original: str, norm: str) -> str:
    """The country-code digits of a phone number (kept: they identify a country, not a person)."""
    stripped = original.lstrip(" (")
    if stripped.startswith(("+", "00")):
        import phonenumbers

        try:
            number = phonenumbers.parse("+" + (stripped[2:] if stripped.startswith("00") else stripped[1:]), None)
        except phonenumbers.NumberParseException:
            return ""
        code = str(number.country_code)
        return ("00" if stripped.startswith("00") else "") + code
    if entity == "CN_PHONE" and len(norm) == 13 and norm.startswith("86"):
        return "86"
    return ""


class FakeMaker:
    """Draws replacements for one salt; results are cached per process (draws are deterministic)."""

    def __init__(self, salt: str = "") -> None:
        self.salt = salt
        self.make = lru_cache(maxsize=65536)(self._make)

    def _make(self, entity: str, original: str, norm: str, locale: str, attempt: int) -> str:
        """The normalised fake for one original (numeric: digits to ``render``; text: the fake)."""
        fake = faker_for(locale)
        with _faker_lock:
            fake.seed_instance(seed_of(self.salt, entity, norm, attempt))
            return self._draw(fake, entity, original, norm, locale)

    def _draw(self, fake, entity: str, original: str, norm: str, locale: str) -> str:
        rnd = fake.random
        if entity == "CN_ID":
            return self._cn_id(fake, norm)
        if entity in CARD_ENTITIES:
            return self._card(fake, rnd, entity, norm)
        if entity in PHONE_ENTITIES:
            return self._phone(fake, rnd, entity, original, norm, locale)
        if entity == "US_SSN":
            return self._ssn(rnd, norm)
        if entity in DIGIT_ENTITIES:
            return marks.apply_digit_mark(self.salt, _digits(rnd, len(norm)))
        if entity == "IBAN_CODE":
            return self._iban(rnd, norm)
        if entity == "EMAIL_ADDRESS":
            return f"{fake.user_name()}{rnd.randint(1, 999)}@{rnd.choice(EMAIL_DOMAINS)}"
        if entity == "IP_ADDRESS":
            return self._ip(rnd, original)
        if entity == "PERSON":
            return self._person(rnd, locale)
        if entity == "LOCATION":
            return self._place(rnd, locale)
        if entity == "STREET_ADDRESS":
            return self._street(rnd, bool(_STREET_UNIT.search(original)))
        if entity == "CN_ADDRESS":
            return self._cn_address(rnd, bool(_CN_UNIT.search(original)))
        return marks.apply_char_mark(self.salt, self._format_preserving(rnd, original))

    # -- numbers ---------------------------------------------------------------------------------
    def _cn_id(self, fake, norm: str) -> str:
        # Region + birth date from Faker's ssn() (CN_* entities always draw in zh_CN); the birth day's
        # tens digit becomes 1 so the mark, which covers the day's units digit and the sequence
        # number, always leaves a real date.
        region_birth = re.sub(r"\D", "", fake.ssn())[:12]
        digits = marks.apply_digit_mark(self.salt, region_birth + "1" + "0000" + "0")
        return digits[:17] + cn_id_check_char(digits[:17])

    def _card(self, fake, rnd, entity: str, norm: str) -> str:
        n = len(norm)
        if entity == "CN_BANK":
            body = "62" + _digits(rnd, n - 2)
        else:
            source = re.sub(r"\D", "", fake.credit_card_number())
            body = source if len(source) == n else source[:6] + _digits(rnd, n - 6)
        body = marks.apply_digit_mark(self.salt, body[:n])
        return body[:-1] + luhn_check_digit(body[:-1])

    def _phone(self, fake, rnd, entity: str, original: str, norm: str, locale: str) -> str:
        prefix = phone_prefix(entity, original, norm)
        n = len(norm) - len(prefix)
        if entity == "CN_LANDLINE":
            area = _CN_AREA.match(original)
            area_len = len(area.group(1)) if area else (3 if norm[len(prefix) :].startswith(("01", "02")) else 4)
            national = "0" + _digits(rnd, area_len - 1, "123456789") + _digits(rnd, n - area_len, "2345678")
        elif entity == "CN_PHONE" or (locale == "zh_CN" and n == 11 and norm[len(prefix) :].startswith("1")):
            national = _fit(rnd, re.sub(r"\D", "", faker_for("zh_CN").phone_number()), n)
        else:
            source = re.sub(r"\D", "", fake.phone_number().split("x")[0])
            national = _fit(rnd, source, n)
        return marks.apply_digit_mark(self.salt, prefix + national)

    def _ssn(self, rnd, norm: str) -> str:
        if len(norm) != 9:
            return marks.apply_digit_mark(self.salt, _digits(rnd, len(norm)))
        area = rnd.choice([a for a in range(1, 900) if a != 666])
        digits = marks.apply_digit_mark(self.salt, f"{area:03d}{rnd.randint(1, 99):02d}{rnd.randint(0, 9999):04d}")
        if digits[5:] == "0000":
            digits = digits[:8] + "1"
        return digits

    def _iban(self, rnd, norm: str) -> str:
        country, bban = norm[:2], norm[4:]
        new = "".join(
            rnd.choice(string.digits) if c.isdigit() else rnd.choice(string.ascii_uppercase) for c in bban
        )
        if len(new) > 8 and new[-4:].isdigit():
            new = new[:-4] + marks.digit_mark(self.salt, new[:-4][-marks.MAC_WINDOW :], 4)
        return country + iban_check_digits(country, new) + new

    def _ip(self, rnd, original: str) -> str:
        if ":" in original:
            groups = [rnd.randint(0, 0xFFFF) for _ in range(6)]
            return str(ipaddress.IPv6Address("2001:db8:" + ":".join(f"{g:x}" for g in groups)))
        net = rnd.choice(marks.RESERVED_IPV4_NETS)
        return str(net.network_address + rnd.randint(1, 254))

    # -- text ------------------------------------------------------------------------------------
    # Each generator fixes all tokens but one and picks that one from the candidates that complete
    # the keyed text mark (marks.solve_token); a miss redraws the free tokens.
    def _solved(self, rnd, parts: list[str], position: int, pool: str, join: str) -> str | None:
        """``parts`` completed at ``position`` by a pool candidate that makes the value marked, or None."""
        probe = list(parts)
        probe[position] = _SLOT
        tokens = marks.text_tokens(join.join(p for p in probe if p))
        probe[position] = marks.pool_example(pool)
        modulus = marks.text_modulus(join.join(p for p in probe if p))
        options = marks.solve_token(self.salt, tokens, tokens.index(_SLOT), pool, modulus)
        if not options:
            return None
        probe[position] = rnd.choice(options)
        value = join.join(p for p in probe if p)
        return value if marks.has_text_mark(self.salt, value) else None

    @staticmethod
    def _draw_marked(rnd, attempt_fn) -> str:
        for _ in range(_MAX_TEXT_TRIES):
            value = attempt_fn()
            if value is not None:
                return value
        raise RuntimeError("could not draw a marked replacement; the candidate lists are too small")

    def _person(self, rnd, locale: str) -> str:
        names = marks.name_lists()
        if locale == "zh_CN":
            chars, pool = names.zh_given_chars, _pool("zh_given_chars", lambda: names.zh_given_chars)
            return self._draw_marked(
                rnd, lambda: self._solved(rnd, [rnd.choice(names.zh_surnames), rnd.choice(chars), ""], 2, pool, "")
            )
        pool = _pool("en_last", lambda: names.en_last)
        return self._draw_marked(rnd, lambda: self._solved(rnd, [rnd.choice(names.en_first), ""], 1, pool, " "))

    def _place(self, rnd, locale: str) -> str:
        if locale == "zh_CN":
            chars = tuple(marks.ZH_PLACE_CHARS)
            pool = _pool("zh_place_chars", lambda: chars)
            return self._draw_marked(
                rnd,
                lambda: self._solved(
                    rnd, [rnd.choice(chars), rnd.choice(chars), "", rnd.choice(marks.ZH_PLACE_SUFFIXES)], 2, pool, ""
                ),
            )

        def attempt():
            suffix = rnd.choice(marks.EN_PLACE_SUFFIXES) if rnd.random() < 0.7 else ""
            pool = _pool(f"en_place{suffix}", lambda: tuple(sorted(w + suffix for w in marks.en_name_words())))
            return self._solved(rnd, [rnd.choice(marks.EN_PLACE_PREFIXES), ""], 1, pool, " ")

        return self._draw_marked(rnd, attempt)

    def _street(self, rnd, unit: bool) -> str:
        names = marks.name_lists()
        words = names.en_last + names.en_first
        pool = _pool("house_numbers", lambda: _HOUSE_NUMBERS)

        def attempt():
            tail = ["Apt", str(rnd.randint(1, 999))] if unit else []
            parts = ["", rnd.choice(words), rnd.choice(STREET_WORDS), *tail]
            return self._solved(rnd, parts, 0, pool, " ")

        return self._draw_marked(rnd, attempt)

    def _cn_address(self, rnd, unit: bool) -> str:
        address = faker_for("zh_CN").provider("faker.providers.address")
        roads = marks.name_lists().zh_surnames + tuple(address.cities)
        pool = _pool("house_numbers_999", lambda: _HOUSE_NUMBERS[:999])

        def attempt():
            head = (rnd.choice(address.provinces) + rnd.choice(address.cities) + "市" + rnd.choice(address.districts)
                    + "区" + rnd.choice(roads) + rnd.choice(ZH_ROAD_SUFFIXES))
            tail = "号"
            if unit:
                tail += f"{rnd.randint(1, 30)}栋{rnd.randint(1, 6)}单元{rnd.randint(1, 30)}{rnd.randint(1, 4):02d}室"
            return self._solved(rnd, [head, "", tail], 1, pool, "")

        return self._draw_marked(rnd, attempt)

    @staticmethod
    def _format_preserving(rnd, original: str) -> str:
        out = []
        for ch in original:
            if ch.isascii() and ch.isdigit():
                out.append(rnd.choice(string.digits))
            elif ch.isascii() and ch.isalpha():
                out.append(rnd.choice(string.ascii_uppercase if ch.isupper() else string.ascii_lowercase))
            elif _CJK.match(ch):
                out.append(rnd.choice(marks.ZH_PLACE_CHARS))
            else:
                out.append(ch)
        return "".join(out)
