"""Recognisable replacements: why running the filter twice changes nothing more.

A second pass detects the fakes written by the first one (a fake phone number is still a phone
number). To leave them alone without keeping any state, every fake carries a *mark* that a later
pass can test from the value alone:

* digit values (phones, IDs, cards, SSN): the 2-4 digits just before the last one are a keyed hash
  (salted SHA-256) of the up-to-5 digits before them. The layout is anchored at the end, so a later
  pass that includes or drops a country code sees the same mark. A real number carries it by chance
  with probability 10^-4 for 10+ digits (10^-3 for 8-9).
* IBAN: the last four BBAN digits, the same way.
* free text (names, places, addresses): the keyed hashes of its tokens (case-folded words, single
  CJK characters) at their positions sum to 0 modulo ``TEXT_MARK_MODULUS`` (16384). The sum is
  decomposable, so a generator fixes all tokens but one and picks the last from an index of
  candidates by residue: drawing a marked value costs microseconds. A real value is marked by
  chance with probability 1/16384, except values in the generators' own grammars, which need a
  smaller modulus to leave enough fakes: person names made only of Faker's common first/last names
  or surname + given characters (1/1024, ~670 English and ~4,000 Chinese fakes) and fictional place
  names such as "North Jenniferville" or "安宁江市", which real places rarely match (1/16).
* e-mail and IP addresses: replacements come from ranges reserved for documentation (RFC 2606,
  RFC 6761, RFC 5737, RFC 3849), which never name a real mailbox or host; such values are left as is.
* anything else is format-preserving; its last alphanumerics carry a keyed hash like digits do.

The key is the filter's ``hash_salt``: a different salt does not recognise another salt's fakes.
"""

from __future__ import annotations

import hashlib
import ipaddress
import re
import string
from dataclasses import dataclass
from functools import lru_cache

TEXT_MARK_MODULUS = 16384
NAME_MARK_MODULUS = 1024
PLACE_MARK_MODULUS = 16
MAC_WINDOW = 5  # characters hashed into a digit mark
_RESERVED_EMAIL_DOMAINS = ("example.com", "example.net", "example.org")
_RESERVED_EMAIL_TLDS = (".example", ".test", ".invalid", ".localhost")
RESERVED_IPV4_NETS = tuple(
    ipaddress.ip_network(n) for n in ("192.0.2.0/24", "198.51.100.0/24", "203.0.113.0/24")
)
RESERVED_IPV6_NET = ipaddress.ip_network("2001:db8::/32")


def _digest(salt: str, kind: str, value: str) -> int:
    h = hashlib.sha256(salt.encode() + b"\x01" + kind.encode() + b"\x00" + value.encode())
    return int.from_bytes(h.digest()[:8], "big")


def mark_width(n: int) -> int:
    """How many characters of an n-character number hold the mark (0: too short to mark)."""
    if n >= 10:
        return 4
    if n >= 8:
        return 3
    if n >= 6:
        return 2
    return 0


def digit_mark(salt: str, window: str, width: int) -> str:
    return f"{_digest(salt, 'digits', window) % 10**width:0{width}d}"


def apply_digit_mark(salt: str, digits: str) -> str:
    """``digits`` with its mark positions overwritten (the last character is left for a check digit)."""
    n = len(digits)
    width = mark_width(n)
    if not width:
        return digits
    at = n - 1 - width
    return digits[:at] + digit_mark(salt, digits[max(0, at - MAC_WINDOW) : at], width) + digits[at + width :]


def has_digit_mark(salt: str, digits: str) -> bool:
    n = len(digits)
    width = mark_width(n)
    if not width:
        return False
    at = n - 1 - width
    return digits[at : at + width] == digit_mark(salt, digits[max(0, at - MAC_WINDOW) : at], width)


_TEXT_TOKEN = re.compile(r"[\u4e00-\u9fff]|[^\s\u4e00-\u9fff]+")
EN_PLACE_PREFIXES = ("North", "East", "West", "South", "New", "Lake", "Port")
EN_PLACE_SUFFIXES = ("town", "ton", "land", "ville", "berg", "burgh", "borough", "bury", "view", "port", "mouth",
                     "stad", "furt", "chester", "fort", "haven", "side", "shire")
ZH_PLACE_CHARS = "东西南北中新安宁平阳山江河湖川州城海泉林石金宝龙凤华兴永长乐庆丰德昌明清源溪桥岭峰云台远广信"
ZH_PLACE_SUFFIXES = ("市", "县")
_EN_PLACE = re.compile(
    rf"^(?:{'|'.join(EN_PLACE_PREFIXES)}) (?P<name>[A-Z][a-z]+?)(?:{'|'.join(EN_PLACE_SUFFIXES)})?$"
)
_ZH_PLACE = re.compile(rf"^[{ZH_PLACE_CHARS}]{{3}}[{''.join(ZH_PLACE_SUFFIXES)}]$")


@dataclass(frozen=True)
class NameLists:
    """Faker's name lists the generators draw from (plain capitalised words for English)."""

    en_first: tuple[str, ...]
    en_last: tuple[str, ...]
    zh_surnames: tuple[str, ...]
    zh_given_chars: tuple[str, ...]


@lru_cache(maxsize=1)
def name_lists() -> NameLists:
    from faker import Faker

    en = Faker("en_US").provider("faker.providers.person")
    zh = Faker("zh_CN").provider("faker.providers.person")
    plain = re.compile(r"[A-Z][a-z]+")
    return NameLists(
        en_first=tuple(sorted({n for n in en.first_names if plain.fullmatch(n)})),
        en_last=tuple(sorted({n for n in en.last_names if plain.fullmatch(n)})),
        zh_surnames=tuple(sorted({n for n in zh.last_names if len(n) == 1})),
        zh_given_chars=tuple(sorted(set("".join(zh.first_names)))),
    )


@lru_cache(maxsize=1)
def _name_sets() -> tuple[frozenset[str], frozenset[str], frozenset[str], frozenset[str]]:
    lists = name_lists()
    return (frozenset(lists.en_first), frozenset(lists.en_last), frozenset(lists.zh_surnames),
            frozenset(lists.zh_given_chars))


def en_name_words() -> frozenset[str]:
    first, last, _, _ = _name_sets()
    return first | last


def is_common_name(value: str) -> bool:
    """A name in the generator's person grammar: "First Last" from Faker's English lists, or a
    Faker surname plus two given-name characters."""
    first, last, surnames, given = _name_sets()
    words = value.split(" ")
    if len(words) == 2:
        return words[0] in first and words[1] in last
    return len(value) == 3 and value[0] in surnames and value[1] in given and value[2] in given


def is_fictional_place(value: str) -> bool:
    """A name in the generator's fictional-place grammar: "Lake Kevinton", "Port Maria", "安宁江市"."""
    if _ZH_PLACE.match(value):
        return True
    m = _EN_PLACE.match(value)
    if m is None:
        return False
    words = en_name_words()
    rest = value.split(" ", 1)[1]
    return rest in words or any(rest.endswith(x) and rest[: -len(x)] in words for x in EN_PLACE_SUFFIXES)


def text_tokens(value: str) -> list[str]:
    return _TEXT_TOKEN.findall(value.casefold())


@lru_cache(maxsize=1 << 17)
def token_hash(salt: str, position: int, token: str) -> int:
    return _digest(salt, f"tok{position}", token)


def text_modulus(value: str) -> int:
    """PLACE_MARK_MODULUS in the fictional-place grammar, NAME_MARK_MODULUS in the person grammar,
    else TEXT_MARK_MODULUS."""
    value = value.strip()
    if is_fictional_place(value):
        return PLACE_MARK_MODULUS
    return NAME_MARK_MODULUS if is_common_name(value) else TEXT_MARK_MODULUS


def text_residue(salt: str, tokens: list[str], modulus: int, skip: int = -1) -> int:
    return sum(token_hash(salt, i, t) for i, t in enumerate(tokens) if i != skip) % modulus


def has_text_mark(salt: str, value: str) -> bool:
    tokens = text_tokens(value)
    return bool(tokens) and text_residue(salt, tokens, text_modulus(value)) == 0


_POOLS: dict[str, tuple[str, ...]] = {}


def register_pool(name: str, candidates: tuple[str, ...]) -> str:
    """Name a candidate list once so residue indexes are cached by name, not by hashing the list."""
    _POOLS.setdefault(name, candidates)
    return name


def pool_example(name: str) -> str:
    return _POOLS[name][0]


@lru_cache(maxsize=512)
def residue_index(salt: str, position: int, pool: str, modulus: int) -> dict[int, tuple[str, ...]]:
    """The pool's candidates (single tokens) grouped by token hash at ``position`` modulo ``modulus``."""
    index: dict[int, list[str]] = {}
    for c in _POOLS[pool]:
        index.setdefault(token_hash(salt, position, c.casefold()) % modulus, []).append(c)
    return {k: tuple(v) for k, v in index.items()}


def solve_token(salt: str, tokens: list[str], position: int, pool: str, modulus: int) -> tuple[str, ...]:
    """The pool's candidates that, put at ``position`` of ``tokens``, make the whole value marked."""
    need = (-text_residue(salt, tokens, modulus, skip=position)) % modulus
    return residue_index(salt, position, pool, modulus).get(need, ())


def is_reserved_email(value: str) -> bool:
    domain = value.rpartition("@")[2].casefold().rstrip(".")
    if domain.endswith(_RESERVED_EMAIL_TLDS):
        return True
    return any(domain == d or domain.endswith("." + d) for d in _RESERVED_EMAIL_DOMAINS)


def is_reserved_ip(value: str) -> bool:
    try:
        ip = ipaddress.ip_address(value.strip().strip("[]"))
    except ValueError:
        return False
    if ip.version == 4:
        return any(ip in net for net in RESERVED_IPV4_NETS)
    return ip in RESERVED_IPV6_NET


_ALNUM = frozenset(string.ascii_letters + string.digits)


def _char_mark(salt: str, window: str, classes: list[str]) -> str:
    """Mark characters of the given classes ('d' digit, 'u' upper, 'l' lower) from a keyed hash."""
    value = _digest(salt, "chars", window)
    out = []
    for c in classes:
        if c == "d":
            value, r = divmod(value, 10)
            out.append(string.digits[r])
        else:
            value, r = divmod(value, 26)
            out.append((string.ascii_uppercase if c == "u" else string.ascii_lowercase)[r])
    return "".join(out)


def _alnum_positions(value: str) -> list[int]:
    return [i for i, ch in enumerate(value) if ch in _ALNUM]


def _classes(value: str, positions: list[int]) -> list[str]:
    return ["d" if value[i].isdigit() else "u" if value[i].isupper() else "l" for i in positions]


def _char_mark_layout(value: str) -> tuple[list[int], list[int]]:
    """(window positions, mark positions) among the ASCII alphanumerics of ``value``."""
    positions = _alnum_positions(value)
    width = min(4, len(positions) // 2)
    if not width:
        return [], []
    mark_at = positions[-width:]
    return positions[:-width][-MAC_WINDOW:], mark_at


def apply_char_mark(salt: str, value: str) -> str:
    window_at, mark_at = _char_mark_layout(value)
    if not mark_at:
        return value
    mark = _char_mark(salt, "".join(value[i] for i in window_at), _classes(value, mark_at))
    chars = list(value)
    for i, ch in zip(mark_at, mark, strict=True):
        chars[i] = ch
    return "".join(chars)


def has_char_mark(salt: str, value: str) -> bool:
    window_at, mark_at = _char_mark_layout(value)
    if not mark_at:
        return False
    mark = _char_mark(salt, "".join(value[i] for i in window_at), _classes(value, mark_at))
    return "".join(value[i] for i in mark_at) == mark


def has_iban_mark(salt: str, compact: str) -> bool:
    """The last four BBAN digits of an upper-case, space-free IBAN hold the keyed mark."""
    bban = compact[4:]
    if len(bban) <= 8 or not bban[-4:].isdigit():
        return False
    return bban[-4:] == digit_mark(salt, bban[:-4][-MAC_WINDOW:], 4)
