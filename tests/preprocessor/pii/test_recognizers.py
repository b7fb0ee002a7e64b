"""Rule recognizers: Chinese IDs, phones, landlines, bank cards, addresses; vetoes and overlaps."""

from __future__ import annotations

import pytest

from twinkle_agentic.preprocessor.pii.checksums import (
    cn_id_check_char,
    cn_id_checksum_ok,
    luhn_check_digit,
    luhn_ok,
)

GOOD_ID = "11010519491231002X"
BAD_ID = "110105194912310021"  # last character is not the check character


def test_cn_id_checksum():
    assert cn_id_checksum_ok(GOOD_ID)
    assert cn_id_checksum_ok(GOOD_ID.lower())
    assert not cn_id_checksum_ok(BAD_ID)
    assert cn_id_check_char("32010619850622003") == "0"


@pytest.mark.parametrize(
    "text, expected",
    [
        (f"身份证号：{GOOD_ID}", [("CN_ID", GOOD_ID)]),
        (f"身份证号：{GOOD_ID.lower()}，请核对", [("CN_ID", GOOD_ID.lower())]),
        (f"身份证号：{BAD_ID}", []),  # a bad checksum is never reported
        (f"ref A{GOOD_ID}", []),  # touching other alphanumerics
    ],
)
def test_cn_id(find, text, expected):
    assert [f for f in find(text) if f[0] == "CN_ID"] == expected


@pytest.mark.parametrize(
    "value, detected",
    [
        ("13812345678", True),
        ("138-1234-5678", True),
        ("138 1234 5678", True),
        ("+86 138 1234 5678", True),
        ("008613812345678", True),
        ("8613812345678", True),
        ("(+86)13812345678", True),
        ("138 1234-5678", False),  # mixed grouping
        ("12812345678", False),  # 12x is not a mobile prefix
        ("1381234567", False),  # ten digits
        ("213812345678", False),  # touching another digit
    ],
)
def test_cn_phone_forms(find, value, detected):
    text = f"我的手机是{value}，谢谢"
    got = [v for e, v in find(text) if e == "CN_PHONE"]
    assert (got == [value]) is detected, got


@pytest.mark.parametrize(
    "value, detected",
    [("010-62751234", True), ("(0755)86013388", True), ("0755 8601338", True), ("021-6438 1234", True),
     ("400-820-8820", False), ("0012345678", False)],
)
def test_cn_landline(find, value, detected):
    got = [v for e, v in find(f"座机：{value}。") if e == "CN_LANDLINE"]
    assert (got == [value]) is detected, got


def test_cn_bank_luhn(find):
    good = "6222021234567890128"
    bad = good[:-1] + str((int(good[-1]) + 1) % 10)
    assert luhn_ok(good) and not luhn_ok(bad)
    assert find(f"银行卡号：{good}") == [("CN_BANK", good)]
    assert find(f"银行卡号：{bad}") == []
    grouped = "6222 0212 3456 7890 128"
    assert find(f"卡号 {grouped}") == [("CN_BANK", grouped)]


def test_cn_bank_needs_cue_or_unionpay_prefix(find):
    other = "880012345678901234" + luhn_check_digit("880012345678901234")  # 19 digits: no card regex
    unionpay = "621700381002654321" + luhn_check_digit("621700381002654321")
    assert find(f"编号 {other}") == []  # 0.4 on its own
    assert find(f"银行卡号 {other}") == [("CN_BANK", other)]
    assert find(f"编号 {unionpay}") == [("CN_BANK", unionpay)]


def test_valid_cn_id_beats_overlapping_bank_card(find):
    # an 18-digit resident ID whose digits also pass Luhn: the ID wins over a card reading
    for seq in range(1000):
        body = f"44030419901215{seq:03d}"
        value = body + cn_id_check_char(body)
        if value[-1] != "X" and luhn_ok(value):
            break
    assert find(f"银行卡号 {value}") == [("CN_ID", value)]


@pytest.mark.parametrize(
    "text, address",
    [
        ("我住在上海市浦东新区世纪大道100号3栋2单元501室，欢迎来玩", "上海市浦东新区世纪大道100号3栋2单元501室"),
        ("寄到广东省深圳市南山区科技园路8号", "广东省深圳市南山区科技园路8号"),
        ("地址：四川省成都市武侯区人民南路四段12号。", "四川省成都市武侯区人民南路四段12号"),
        ("于都县城关镇长征路12号", "于都县城关镇长征路12号"),
    ],
)
def test_cn_address(find, text, address):
    assert ("CN_ADDRESS", address) in find(text)


def test_cn_address_needs_number_and_two_units(find):
    assert not [e for e, _ in find("我住在北京市朝阳区") if e == "CN_ADDRESS"]
    assert not [e for e, _ in find("人民路100号") if e == "CN_ADDRESS"]


@pytest.mark.parametrize(
    "text, address",
    [
        ("I live at 742 Evergreen Terrace, Springfield.", "742 Evergreen Terrace"),
        ("Ship to 1200 Ocean Drive Apt 5B, Miami.", "1200 Ocean Drive Apt 5B"),
        ("Office: 350 Fifth Ave, Suite 3300, New York", "350 Fifth Ave, Suite 3300"),
        ("Send it to 1600 Pennsylvania Avenue NW, Washington", "1600 Pennsylvania Avenue NW"),
        ("It's at 9 Elm St. Then turn left.", "9 Elm St"),
    ],
)
def test_street_address(find, text, address):
    assert ("STREET_ADDRESS", address) in find(text)


@pytest.mark.parametrize(
    "text, entity, value",
    [
        ("mail john.doe@gmail.com now", "EMAIL_ADDRESS", "john.doe@gmail.com"),
        ("服务器10.0.3.17的负责人", "IP_ADDRESS", "10.0.3.17"),
        ("peer 2a02:6b8::feed:0ff dropped", "IP_ADDRESS", "2a02:6b8::feed:0ff"),
        ("Call me at (212) 555-0187 tonight", "PHONE_NUMBER", "(212) 555-0187"),
        ("Her social security number is 078-51-2230.", "US_SSN", "078-51-2230"),
    ],
)
def test_pattern_entities(find, text, entity, value):
    assert (entity, value) in find(text)


@pytest.mark.parametrize(
    "text",
    [
        "Use the icon@2x.png asset",  # not a public suffix
        "Version 1.0.0.1 of the driver",  # looks like IPv4
        "Invoice INV-2023-000481 is due",  # single separator: not a phone without a cue
        "Request id 550e8400-e29b-41d4-a716-446655440000 timed out",
        "Pi is approximately 3.14159265358979",
        "commit 3f9a2c1e8b7d6f5a4e3d2c1b0a9f8e7d6c5b4a39",
        "订单号：202311051234567，预计明天发货。",
    ],
)
def test_hard_negatives(find, text):
    assert find(text) == []
