"""Replacements: seeded and deterministic across processes, consistent in a row, locale-matched,
valid (check digits), marked (so a second pass leaves them alone), collision-free."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys

import pytest

pytest.importorskip("faker")

from tests.support.paths import REPO_ROOT
from twinkle_agentic.preprocessor.pii import marks
from twinkle_agentic.preprocessor.pii.checksums import cn_id_checksum_ok, iban_ok, luhn_ok
from twinkle_agentic.preprocessor.pii.fakes import FakeMaker, normalise, render, seed_of
from twinkle_agentic.preprocessor.pii.replacement import RowReplacer, is_replacement

ROOT = REPO_ROOT
SAMPLES = [
    ("PERSON", "John Smith", False),
    ("PERSON", "王小明", True),
    ("LOCATION", "Boston", False),
    ("LOCATION", "上海", True),
    ("EMAIL_ADDRESS", "John.Doe@gmail.com", False),
    ("PHONE_NUMBER", "(212) 555-0199", False),
    ("PHONE_NUMBER", "+44 20 7946 0958", False),
    ("CN_PHONE", "+86 138-1234-5678", True),
    ("CN_LANDLINE", "(0755)86013388", True),
    ("CN_ID", "11010519491231002X", True),
    ("CN_BANK", "6222 0212 3456 7890 128", True),
    ("CREDIT_CARD", "4539-1488-0343-6467", False),
    ("IBAN_CODE", "DE89 3704 0044 0532 0130 00", False),
    ("IP_ADDRESS", "10.24.8.113", False),
    ("IP_ADDRESS", "2a02:6b8::feed:ff", False),
    ("US_SSN", "539-48-0120", False),
    ("STREET_ADDRESS", "1200 Ocean Drive Apt 5B", False),
    ("CN_ADDRESS", "浙江省杭州市西湖区文三路478号", True),
    ("ORGANIZATION", "Acme Widgets 2024", False),
]
_SCRIPT = """
import json, sys
from twinkle_agentic.preprocessor.pii.fakes import FakeMaker
from twinkle_agentic.preprocessor.pii.replacement import RowReplacer
samples = json.loads(sys.argv[1])
replacer = RowReplacer(FakeMaker("salt-1"))
print(json.dumps([replacer.replace(e, v, 0, len(v), zh) for e, v, zh in samples], ensure_ascii=False))
"""


def _replace_all(salt: str = "salt-1") -> list[str]:
    replacer = RowReplacer(FakeMaker(salt))
    return [replacer.replace(e, v, 0, len(v), zh) for e, v, zh in SAMPLES]


def test_seed_is_salted_sha256_prefix():
    import hashlib

    expected = int.from_bytes(hashlib.sha256(b"s\x00PERSON\x00Ann Lee").digest()[:8], "big")
    assert seed_of("s", "PERSON", "Ann Lee") == expected
    assert seed_of("s", "PERSON", "Ann Lee", 1) != expected


def test_deterministic_across_processes():
    here = _replace_all()
    env = {**os.environ, "PYTHONHASHSEED": "12345", "PYTHONPATH": str(ROOT)}
    out = subprocess.run(
        [sys.executable, "-c", _SCRIPT, json.dumps(SAMPLES, ensure_ascii=False)],
        capture_output=True, text=True, env=env, check=True, timeout=120,
    )
    assert json.loads(out.stdout) == here
    assert all(new != old for new, (_, old, _) in zip(here, SAMPLES, strict=True))


def test_salt_changes_fakes():
    assert _replace_all("salt-1") != _replace_all("salt-2")


def test_replacements_are_valid_and_keep_layout():
    fakes = dict(zip([v for _, v, _ in SAMPLES], _replace_all(), strict=True))
    cn_id = fakes["11010519491231002X"]
    assert cn_id_checksum_ok(cn_id) and cn_id != "11010519491231002X"
    assert luhn_ok(re.sub(r"\D", "", fakes["6222 0212 3456 7890 128"]))
    assert re.fullmatch(r"\d{4} \d{4} \d{4} \d{4} \d{3}", fakes["6222 0212 3456 7890 128"])
    assert luhn_ok(re.sub(r"\D", "", fakes["4539-1488-0343-6467"]))
    assert iban_ok(fakes["DE89 3704 0044 0532 0130 00"]) and fakes["DE89 3704 0044 0532 0130 00"].startswith("DE")
    assert re.fullmatch(r"\(\d{3}\) \d{3}-\d{4}", fakes["(212) 555-0199"])
    assert fakes["+44 20 7946 0958"].startswith("+44 ")
    assert re.fullmatch(r"\+86 1[3-9]\d-\d{4}-\d{4}", fakes["+86 138-1234-5678"])
    assert re.fullmatch(r"\(0\d{3}\)\d{8}", fakes["(0755)86013388"])
    assert marks.is_reserved_email(fakes["John.Doe@gmail.com"])
    assert marks.is_reserved_ip(fakes["10.24.8.113"]) and ":" in fakes["2a02:6b8::feed:ff"]
    assert marks.is_reserved_ip(fakes["2a02:6b8::feed:ff"])


def test_every_fake_is_recognised_as_a_replacement():
    for (entity, _, _), fake in zip(SAMPLES, _replace_all(), strict=True):
        assert is_replacement("salt-1", entity, fake, 0, len(fake)), (entity, fake)
        assert not is_replacement("other-salt", entity, fake, 0, len(fake)) or entity in ("EMAIL_ADDRESS", "IP_ADDRESS")


def test_locale_follows_the_text():
    replacer = RowReplacer(FakeMaker())
    zh_name = replacer.replace("PERSON", "小明", 0, 2, True)
    en_name = replacer.replace("PERSON", "Ann Lee", 0, 7, False)
    assert re.fullmatch(r"[\u4e00-\u9fff]{2,4}", zh_name)
    assert re.fullmatch(r"[A-Z][a-z]+ [A-Z][a-z]+", en_name)
    # an English name inside Chinese text (> 15 % CJK) is drawn in zh_CN
    assert re.search(r"[\u4e00-\u9fff]", replacer.replace("PERSON", "Bob Stone", 0, 9, True))


def test_consistent_within_a_row_and_collision_free():
    replacer = RowReplacer(FakeMaker())
    first = replacer.replace("EMAIL_ADDRESS", "Ann@Mail.com", 0, 12, False)
    assert replacer.replace("EMAIL_ADDRESS", "ann@mail.com", 0, 12, False) == first  # case-folded
    phone = "13812345678"
    a = replacer.replace("CN_PHONE", phone, 0, len(phone), True)
    b = replacer.replace("CN_PHONE", "138-1234-5678", 0, 13, True)
    assert b == f"{a[:3]}-{a[3:7]}-{a[7:]}"  # same digits, the occurrence's own layout
    names = [f"Person{i} Example" for i in range(60)]
    fakes = [replacer.replace("PERSON", n, 0, len(n), False) for n in names]
    assert len(set(fakes)) == len(fakes)


def test_marked_original_is_left_alone():
    fake = RowReplacer(FakeMaker()).replace("CN_ID", "11010519491231002X", 0, 18, True)
    assert RowReplacer(FakeMaker()).replace("CN_ID", fake, 0, 18, True) == fake


def test_render_pours_digits_into_layout():
    assert render("PHONE_NUMBER", "(212) 555-0199", "3125550100") == "(312) 555-0100"
    assert normalise("CN_ID", "11010519491231002x") == "11010519491231002X"
