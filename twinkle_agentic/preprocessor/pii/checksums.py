"""Check digits used both to validate detections and to make replacements valid.

GB 11643-1999 (Chinese resident ID), Luhn (bank and credit cards) and ISO 13616 (IBAN).
"""

from __future__ import annotations

import datetime as _dt

CN_ID_WEIGHTS = (7, 9, 10, 5, 8, 4, 2, 1, 6, 3, 7, 9, 10, 5, 8, 4, 2)
CN_ID_CHECK_CHARS = "10X98765432"


def cn_id_check_char(first17: str) -> str:
    """The GB 11643 check character for the first 17 digits of a resident ID."""
    total = sum(int(d) * w for d, w in zip(first17, CN_ID_WEIGHTS, strict=True))
    return CN_ID_CHECK_CHARS[total % 11]


def cn_id_checksum_ok(value: str) -> bool:
    """True when ``value`` is 17 digits plus the matching check character (X in either case)."""
    if len(value) != 18 or not value[:17].isdigit():
        return False
    return cn_id_check_char(value[:17]) == value[17].upper()


def cn_id_date_ok(value: str, *, today: _dt.date | None = None) -> bool:
    """True when the birth date (digits 7-14) is a real date between 1900 and today."""
    try:
        born = _dt.date(int(value[6:10]), int(value[10:12]), int(value[12:14]))
    except ValueError:
        return False
    return _dt.date(1900, 1, 1) <= born <= (today or _dt.date.today())


def luhn_check_digit(payload: str) -> str:
    """The digit that makes ``payload + digit`` pass the Luhn check."""
    total = 0
    for i, ch in enumerate(reversed(payload)):
        d = int(ch)
        if i % 2 == 0:  # these positions are doubled once the check digit is appended
            d *= 2
            if d > 9:
                d -= 9
        total += d
    return str((10 - total % 10) % 10)


def luhn_ok(digits: str) -> bool:
    return len(digits) >= 2 and digits.isdigit() and luhn_check_digit(digits[:-1]) == digits[-1]


def iban_check_digits(country: str, bban: str) -> str:
    """The two ISO 13616 check digits for ``country`` + ``bban`` (letters A=10 ... Z=35)."""
    rearranged = (bban + country + "00").upper()
    number = "".join(str(int(ch, 36)) for ch in rearranged)
    return f"{98 - int(number) % 97:02d}"


def iban_ok(value: str) -> bool:
    compact = "".join(value.split()).upper()
    if len(compact) < 15 or not compact[:2].isalpha() or not compact[2:4].isdigit():
        return False
    return iban_check_digits(compact[:2], compact[4:]) == compact[2:4]
