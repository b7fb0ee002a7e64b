"""Recognisable replacements: why running the filter twice changes nothing more.

A second pass detects the fakes written by the first one (a fake phone number is still a phone
number). To leave them alone without keeping any state, every fake carries a *mark* that a later
pass can test from the value alone:

* digit values (phones, IDs, cards, SSN): the 2-4 digits just before the last one are a keyed hash
  (salted SHA-256) of the up-to-5 digits before them. The layout is anchored at the end, so a later
  pass that includes or drops a country code sees the same mark. A real number carries it by chance
  with probability 10^-4 for 10+ digits (10^-3 for 8-9).
* IBAN: the last four BBAN digits, the same way.
* free text (names, places, addresses): the keyed hash of the case-folded value is 0 modulo
  ``TEXT_MARK_MODULUS``; replacements are drawn until they are marked. A real value is marked by
  chance with probability 1/1024 and is then left as is.
* e-mail and IP addresses: replacements come from ranges reserved for documentation (RFC 2606,
  RFC 6761, RFC 5737, RFC 3849), which never name a real mailbox or host; such values are left as is.
* anything else is format-preserving; its last alphanumerics carry a keyed hash like digits do.

The key is the filter's ``hash_salt``: a different salt does not recognise another salt's fakes.
"""

from __future__ import annotations

import hashlib
import ipaddress
import string

TEXT_MARK_MODULUS = 1024
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


def text_key(value: str) -> str:
    return " ".join(value.split()).casefold()


def has_text_mark(salt: str, value: str) -> bool:
    key = text_key(value)
    return bool(key) and _digest(salt, "text", key) % TEXT_MARK_MODULUS == 0


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
