"""Generate the labelled PII evaluation set bench/data/pii_eval.jsonl (English and Chinese).

Three parts, all deterministic (fixed seeds):
* faker: templates filled with Faker values (names, e-mails, phones, IDs, cards, IBANs, IPs,
  addresses), each insertion recorded as a span;
* hand: hand-written sentences with inline labels ``[[ENTITY|value]]``, including names Faker does
  not produce (compound surnames, initials, mixed-language text);
* negative: hard negatives that must yield no span: version numbers, hashes, UUIDs, timestamps,
  order numbers, code, paths, prices, tech vocabulary (some also carry one real entity).

Each line: {"id", "lang", "part", "text", "spans": [{"start", "end", "entity"}]}.
Run: python bench/pii_eval_set.py [--out bench/data/pii_eval.jsonl]
"""

from __future__ import annotations

import argparse
import json
import random
import re
import string
from pathlib import Path

SEED = 20240601
OUT = Path(__file__).parent / "data" / "pii_eval.jsonl"

EN_CITIES = ("Boston", "Chicago", "Seattle", "Denver", "Austin", "London", "Paris", "Berlin", "Madrid", "Tokyo",
             "Toronto", "Sydney", "Dublin", "Munich", "San Francisco", "New York", "Los Angeles", "Amsterdam",
             "Singapore", "Vienna", "Germany", "France", "Canada", "Japan", "Texas", "California", "Ohio")
ZH_CITIES = ("北京", "上海", "广州", "深圳", "杭州", "成都", "武汉", "南京", "西安", "重庆", "苏州", "天津",
             "长沙", "青岛", "厦门", "昆明", "大连", "沈阳", "哈尔滨", "郑州")
STREET_SUFFIXES = ("Street", "St", "Avenue", "Ave", "Road", "Rd", "Lane", "Drive", "Dr", "Boulevard", "Way",
                   "Court", "Place")
# Assigned North American area codes (random Faker numbers often use unassigned ones, which no real
# number has and phonenumbers rightly rejects).
US_AREA_CODES = ("212", "213", "310", "312", "415", "617", "646", "702", "718", "917", "206", "303", "404",
                 "512", "602", "713", "214", "305", "503", "619", "650", "408", "202", "215", "773")
ZH_ROADS = ("人民路", "中山路", "解放路", "建国路", "和平街", "长江路", "黄河路", "世纪大道", "科技园路", "文化街")
ZH_LANDLINE_AREAS = ("010", "021", "020", "0755", "0571", "028", "027", "025", "029", "023")

EN_TEMPLATES = (
    "Hi, I'm {PERSON}. You can reach me at {EMAIL} or {PHONE}.",
    "Please ship the order to {STREET}, {CITY}.",
    "My SSN is {SSN} and the card on file is {CARD}.",
    "Wire the deposit to IBAN {IBAN}, account holder {PERSON}.",
    "The server at {IP} rejected the login from {EMAIL}.",
    "{PERSON} from {CITY} called yesterday; call back on {PHONE}.",
    "Contact: {PERSON} <{EMAIL}>",
    "Customer {PERSON} lives at {STREET} in {CITY}.",
    '{{"name": "{PERSON}", "email": "{EMAIL}", "phone": "{PHONE}"}}',
    "Can you draft an email to {PERSON} about the meeting in {CITY} next week?",
    "Charge card {CARD} for the annual plan; billing contact {EMAIL}.",
    "Log: user {EMAIL} connected from {IP} at 2024-03-15T10:22:33Z.",
    "Thanks {PERSON}! I forwarded your note to {PERSON2} ({EMAIL}).",
    "Emergency contact: {PERSON}, phone {PHONE}, address {STREET}.",
    "Social security number: {SSN}. Mobile: {PHONE}.",
    "I moved from {CITY} to {CITY2} last year and my new address is {STREET}.",
    "Refund to the Visa ending card number {CARD} requested by {PERSON}.",
    "Firewall rule: allow {IP} and deny {IP2}.",
    "Dear {PERSON}, your IBAN {IBAN} has been verified.",
    "Meeting notes: {PERSON} and {PERSON2} agreed to follow up by email at {EMAIL}.",
)
ZH_TEMPLATES = (
    "我叫{ZH_PERSON}，手机号是{CN_PHONE}，邮箱{ZH_EMAIL}。",
    "收件人：{ZH_PERSON}，地址：{CN_ADDRESS}，电话：{CN_PHONE}",
    "请把发票寄到{CN_ADDRESS}，联系人{ZH_PERSON}。",
    "身份证号：{CN_ID}，银行卡号：{CN_BANK}",
    "{ZH_PERSON}的座机是{CN_LANDLINE}，有事可以打这个电话。",
    "客户{ZH_PERSON}反馈说在{ZH_CITY}的门店无法刷卡，卡号{CN_BANK}。",
    "服务器{IP}的管理员是{ZH_PERSON}，邮箱{ZH_EMAIL}。",
    '{{"姓名": "{ZH_PERSON}", "手机": "{CN_PHONE}", "身份证": "{CN_ID}"}}',
    "我下周去{ZH_CITY}出差，到时候联系{ZH_PERSON}，他的电话是{CN_PHONE}。",
    "信用卡{CARD}已经绑定，持卡人{ZH_PERSON}。",
    "公司总机{CN_LANDLINE}，传真同号，地址在{CN_ADDRESS}。",
    "麻烦帮我查一下身份证{CN_ID}的办理进度，谢谢。",
    "{ZH_PERSON}和{ZH_PERSON2}明天一起去{ZH_CITY}开会。",
    "退款请打到我的银行卡{CN_BANK}，户名{ZH_PERSON}。",
    "新的收货地址是{CN_ADDRESS}，手机{CN_PHONE}。",
    "你好{ZH_PERSON}，你的账户已绑定手机{CN_PHONE}和邮箱{ZH_EMAIL}。",
    "请联系我们的客服经理{ZH_PERSON}，电话{CN_LANDLINE}。",
    "我在{ZH_CITY}工作，老家是{ZH_CITY2}的。",
    "用户{ZH_PERSON}（身份证号{CN_ID}）申请了贷款。",
    "Please contact {ZH_PERSON} at {ZH_EMAIL} or {CN_PHONE}.",
)

# Hand-written texts: [[ENTITY|value]] marks a labelled span.
HAND_EN = (
    "Hey, it's [[PERSON|Maria Gonzalez]] here, my cell is [[PHONE_NUMBER|(415) 555-0132]].",
    "Forward the contract to [[PERSON|J. R. Hartley]] at [[EMAIL_ADDRESS|jrhartley@fishbooks.co.uk]].",
    "I was born in [[LOCATION|Manchester]] but now live in [[LOCATION|Lisbon]].",
    "Send the keys to [[STREET_ADDRESS|221B Baker Street]], [[LOCATION|London]].",
    "[[PERSON|Priya Raman]] reported the bug; her SSN [[US_SSN|539-48-0120]] was leaked in the logs.",
    "Our office is at [[STREET_ADDRESS|350 Fifth Avenue, Suite 3300]], [[LOCATION|New York]].",
    "Please call [[PERSON|Dr. Ahmed Khan]] on [[PHONE_NUMBER|+44 20 7946 0958]] before noon.",
    "The card [[CREDIT_CARD|4539 1488 0343 6467]] was declined twice.",
    "Transfer to [[IBAN_CODE|DE89 3704 0044 0532 0130 00]] please, reference 4471.",
    "SSH into [[IP_ADDRESS|10.24.8.113]] and restart the worker.",
    "IPv6 peer [[IP_ADDRESS|2a02:6b8::feed:0ff]] dropped the connection.",
    "Can [[PERSON|Olivia]] review the PR before [[PERSON|Noah]] merges it?",
    "My name is [[PERSON|Ken Watanabe]] and I live in [[LOCATION|Osaka]].",
    "Email [[EMAIL_ADDRESS|support+billing@acme-widgets.io]] if the invoice is wrong.",
    "[[PERSON|Sarah O'Connor]] moved to [[STREET_ADDRESS|42 Wallaby Way]], [[LOCATION|Sydney]].",
    "Call me at [[PHONE_NUMBER|212-555-0187]] or text [[PHONE_NUMBER|646.555.0144]].",
    "Patient [[PERSON|Robert Miller]], DOB withheld, address [[STREET_ADDRESS|1600 Amphitheatre Parkway]].",
    "I told Grandma [[PERSON|Rose]] we'd visit [[LOCATION|Vermont]] in the fall.",
    "The new hire, [[PERSON|Lucas Bernard]], starts Monday in the [[LOCATION|Paris]] office.",
    "Reimburse [[PERSON|Chen Jing]] via [[EMAIL_ADDRESS|chen.jing@outlook.com]].",
    "Assistant: I have updated the shipping address to [[STREET_ADDRESS|77 Massachusetts Ave]], [[LOCATION|Cambridge]].",
    "Booking confirmed for [[PERSON|Emily Clarke]], contact [[PHONE_NUMBER|+1 617 555 0199]].",
    "My Amex is [[CREDIT_CARD|3714 496353 98431]] and expires next month.",
    "[[PERSON|Hannah Schmidt]] from [[LOCATION|Hamburg]] asked for a callback.",
    "Ping [[PERSON|Tom]] on Slack, or mail [[EMAIL_ADDRESS|tom.baker@gmail.com]].",
    "We met [[PERSON|Jean-Luc Picard]] in [[LOCATION|Marseille]] last summer.",
    "Ship to [[PERSON|Ana Souza]], [[STREET_ADDRESS|1200 Ocean Drive Apt 5B]], [[LOCATION|Miami]].",
    "Her social security number is [[US_SSN|078-51-2230]].",
    "Gateway [[IP_ADDRESS|192.168.1.254]] forwards traffic to [[IP_ADDRESS|172.16.40.2]].",
    "Thanks, [[PERSON|Michael]]! I'll send the draft to [[EMAIL_ADDRESS|m.jordan@bulls-fan.net]] tonight.",
    "Write a birthday note for my sister [[PERSON|Laura Chen]], who lives in [[LOCATION|Vancouver]].",
    "Mr. [[PERSON|Patel]] said the parcel never arrived at [[STREET_ADDRESS|9 Elm Court]].",
    "Use card [[CREDIT_CARD|5555555555554444]] for the test purchase.",
    "The tenant, [[PERSON|David Kim]], can be reached at [[PHONE_NUMBER|(312) 555-0110]].",
    "Flight from [[LOCATION|Denver]] to [[LOCATION|Atlanta]] booked for [[PERSON|Jessica Lee]].",
    "请联系[[PERSON|李娜]] at [[EMAIL_ADDRESS|li.na@163.com]] for the Chinese invoice.",
    "Our [[LOCATION|Shenzhen]] supplier, [[PERSON|Wang Lei]], needs the drawings today.",
    "Tool result: {\"owner\": \"[[PERSON|Fatima Al-Sayed]]\", \"ip\": \"[[IP_ADDRESS|8.8.4.4]]\"}",
    "I'm [[PERSON|Carlos]] and my phone is [[PHONE_NUMBER|+34 612 34 56 78]].",
    "Please update [[PERSON|Nguyen Van An]]'s address to [[STREET_ADDRESS|18 Harbour Rd]].",
)
HAND_ZH = (
    "我是[[PERSON|欧阳娜娜]]，电话[[CN_PHONE|13912345678]]。",
    "[[PERSON|司马懿]]和[[PERSON|诸葛亮]]是三国时期的人物。",
    "请把快递寄到[[CN_ADDRESS|浙江省杭州市西湖区文三路478号]]，收件人[[PERSON|陈静]]。",
    "我的身份证号是[[CN_ID|11010519491231002X]]。",
    "[[PERSON|王伟]]的手机是[[CN_PHONE|+86 138 0013 8000]]，微信同号。",
    "客服热线：400-820-8820不是个人号码，但座机[[CN_LANDLINE|010-62751234]]是。",
    "联系人：[[PERSON|郑秀文]] 手机：[[CN_PHONE|139-1234-5678]]",
    "包裹已送达，签收人：[[PERSON|何丽]]。",
    "你好，我是[[PERSON|张伟]]，来自[[CN_ADDRESS|上海市浦东新区世纪大道100号]]。",
    "[[PERSON|刘洋]]老师说明天的课改到下午。",
    "我在[[LOCATION|成都]]读的大学，后来去了[[LOCATION|深圳]]工作。",
    "转账请用工商银行卡[[CN_BANK|6222 0212 3456 7890 128]]，户名[[PERSON|赵建国]]。",
    "邮箱[[EMAIL_ADDRESS|zhangsan@qq.com]]已经不用了，请发到[[EMAIL_ADDRESS|san.zhang@163.com]]。",
    "[[PERSON|林俊杰]]周末在[[LOCATION|南京]]开演唱会。",
    "请[[PERSON|孙悦]]把文件发给[[PERSON|马晓东]]。",
    "家庭住址：[[CN_ADDRESS|广东省深圳市南山区科技园路8号3栋2单元501室]]",
    "公民身份号码[[CN_ID|44030419901215001X]]，请核对。",
    "座机：[[CN_LANDLINE|(0755)86013388]]，手机：[[CN_PHONE|15800001111]]",
    "[[PERSON|黄晓明]]今天去[[LOCATION|杭州]]出差了。",
    "我的名字叫[[PERSON|宇文泰]]，是新来的同事。",
    "经理[[PERSON|周杰]]让我把报告发到[[EMAIL_ADDRESS|zhou.jie@company.cn]]。",
    "工具返回：{\"name\": \"[[PERSON|吴磊]]\", \"mobile\": \"[[CN_PHONE|18612345678]]\"}",
    "收货人[[PERSON|钱多多]]，地址[[CN_ADDRESS|北京市朝阳区建国路88号SOHO现代城5号楼1201室]]",
    "请帮我给母亲写一封信，祝她生日快乐。",
    "[[PERSON|慕容雪]]的银行卡号是[[CN_BANK|6217003810026543218]]吗？",
    "[[PERSON|王小明]]说他住在[[CN_ADDRESS|江苏省南京市鼓楼区中山路321号]]。",
    "服务器地址是[[IP_ADDRESS|10.0.3.17]]，负责人[[PERSON|蔡文]]。",
    "我叫[[PERSON|李雷]]，她叫[[PERSON|韩梅梅]]，我们是同学。",
    "请致电[[CN_PHONE|13600001234]]联系[[PERSON|高远]]先生。",
    "对方的信用卡号是[[CREDIT_CARD|4111 1111 1111 1111]]，已冻结。",
    "[[PERSON|杨帆]]从[[LOCATION|武汉]]寄来了一箱热干面。",
    "我们在[[LOCATION|西安]]见过[[PERSON|曹操]]的雕像。",
    "身份证：[[CN_ID|320106198506220030]]，姓名：[[PERSON|徐静蕾]]",
    "联系电话[[CN_LANDLINE|021-64381234]]，联系人[[PERSON|沈芳]]女士。",
    "My colleague [[PERSON|叶子涵]] will email you from [[EMAIL_ADDRESS|ye.zihan@126.com]].",
    "[[PERSON|赵丽颖]]在[[LOCATION|横店]]拍戏。",
    "我是[[LOCATION|重庆]]人，现在住在[[CN_ADDRESS|四川省成都市武侯区人民南路四段12号]]。",
    "请问[[PERSON|范冰冰]]的经纪人电话是多少？",
    "收到，[[PERSON|谢娜]]，我马上处理。",
    "下单人[[PERSON|邓超]]，手机号[[CN_PHONE|17712345678]]，备注：放门口。",
)
NEGATIVES = (
    ("en", "Upgrade numpy to 1.26.4 and torch to 2.3.1 before running the tests."),
    ("en", "The commit 3f9a2c1e8b7d6f5a4e3d2c1b0a9f8e7d6c5b4a39 fixed the race condition."),
    ("en", "Request id 550e8400-e29b-41d4-a716-446655440000 timed out after 30s."),
    ("en", "Build finished at 2024-03-15T10:22:33Z with exit code 0."),
    ("en", "Order #100234567 shipped; tracking number 1Z999AA10123456784."),
    ("en", "def add(a, b):\n    return a + b  # O(1)\nprint(add(2, 3))"),
    ("en", "Set MAX_RETRIES=5 and TIMEOUT_MS=30000 in config.yaml."),
    ("en", "The SHA-256 digest is e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855."),
    ("en", "Run `pip install -r requirements.txt` then `python -m pytest -q`."),
    ("en", "Unix timestamp 1700000000 corresponds to November 2023."),
    ("en", "Version 1.0.0.1 of the driver is required for this firmware."),
    ("en", "The total is $1,234.56 including 8.25% tax."),
    ("en", "Listen on localhost:8080 and proxy /api to port 9000."),
    ("en", "Use Docker and Kubernetes to deploy the Flask app behind Nginx."),
    ("en", "PyTorch 2.3 and TensorFlow 2.16 both support Python 3.11."),
    ("en", "chmod 755 /usr/local/bin/run.sh && ./run.sh --workers 16"),
    ("en", "Pi is approximately 3.14159265358979 and e is 2.718281828."),
    ("en", "The matrix has shape (1024, 768) and dtype float32."),
    ("en", "Invoice INV-2023-000481 is due on 2024-01-31."),
    ("en", "Error 404: page /users/12345/profile not found."),
    ("en", "ISBN 978-3-16-148410-0 is printed on the back cover."),
    ("en", "Call the function with seed=42 and batch_size=128."),
    ("en", "The model reached 93.7% accuracy after 12 epochs on 4 GPUs."),
    ("en", "Set the background color to #FF5733 and the border to 2px."),
    ("en", "The API returns HTTP 200 with a JSON body like {\"ok\": true, \"count\": 17}."),
    ("en", "Git tag v2.14.0 was pushed to origin/main at 14:05."),
    ("en", "Chapter 7 covers the Fourier transform and Bayesian inference."),
    ("en", "Hello World! This is a simple Markdown example with **bold** text."),
    ("en", "The package weighs 2.5 kg and measures 30 x 20 x 10 cm."),
    ("en", "Run the migration 20240315102233_add_users_table.rb before deploying."),
    ("en", "Regex ^[A-Z]{2}\\d{6}$ matches codes like AB123456."),
    ("en", "Temperature dropped to -12.5 C overnight; wind 35 km/h."),
    ("en", "Error code 0x80070005 means access denied."),
    ("en", "The AWS region us-east-1 has the lowest latency for this workload."),
    ("en", "Base64 of hello is aGVsbG8= and its MD5 is 5d41402abc4b2a76b9719d911017c592."),
    ("zh", "请把numpy升级到1.26.4版本，然后重新运行测试。"),
    ("zh", "订单号：202311051234567，预计明天发货。"),
    ("zh", "提交哈希为a3f9c2e1b8d7，修复了内存泄漏问题。"),
    ("zh", "今天天气很好，我们去公园散步吧。"),
    ("zh", "这个函数的时间复杂度是O(n log n)，空间复杂度是O(1)。"),
    ("zh", "会议时间改为2024年3月15日下午3点，地点在三楼会议室。"),
    ("zh", "本次更新的版本号是v3.2.1，发布时间是2024-03-15 10:22:33。"),
    ("zh", "快递单号SF1234567890123已签收。"),
    ("zh", "请求ID为550e8400-e29b-41d4-a716-446655440000的任务失败了。"),
    ("zh", "总价是1234.56元，含税8.25%。"),
    ("zh", "高速公路上车很多，我们晚点到。"),
    ("zh", "端口8080被占用了，请改用9000。"),
    ("zh", "用Python写一个快速排序，输入是一个整数列表。"),
    ("zh", "这篇论文介绍了贝叶斯推断和傅里叶变换的应用。"),
    ("zh", "学生人数为1523人，其中女生占52.3%。"),
    ("zh", "时间戳1700000000对应2023年11月。"),
    ("zh", "工单编号WO-2024-000123已经关闭。"),
    ("zh", "把温度调到26度，风速调到三档。"),
    ("zh", "这条河全长约5464公里，流域面积约75万平方公里。"),
    ("zh", "这款手机的屏幕是6.7英寸，电池容量5000毫安时。"),
    ("zh", "第3章讲的是线性代数，第4章是概率论。"),
    ("zh", "数据集包含128000条样本，分为训练集和测试集。"),
    ("zh", "请在明天上午10:30之前提交周报。"),
    ("zh", "错误码E1024表示磁盘空间不足。"),
    ("zh", "矩阵的维度是(1024, 768)，数据类型是float32。"),
)

_MARK = re.compile(r"\[\[([A-Z_]+)\|(.+?)\]\]")


def parse_marked(marked: str) -> tuple[str, list[dict]]:
    out, spans, pos = [], [], 0
    length = 0
    for m in _MARK.finditer(marked):
        chunk = marked[pos : m.start()]
        out.append(chunk)
        length += len(chunk)
        spans.append({"start": length, "end": length + len(m.group(2)), "entity": m.group(1)})
        out.append(m.group(2))
        length += len(m.group(2))
        pos = m.end()
    out.append(marked[pos:])
    return "".join(out), spans


def _luhn_complete(payload: str) -> str:
    total = 0
    for i, ch in enumerate(reversed(payload)):
        d = int(ch) * (2 if i % 2 == 0 else 1)
        total += d - 9 if d > 9 else d
    return payload + str((10 - total % 10) % 10)


class Values:
    """Faker-backed value makers for each template slot: slot -> (entity, value)."""

    def __init__(self, seed: int) -> None:
        from faker import Faker

        Faker.seed(seed)
        self.en = Faker("en_US")
        self.zh = Faker("zh_CN")
        self.en.seed_instance(seed)
        self.zh.seed_instance(seed + 1)
        self.rnd = random.Random(seed)

    def slot(self, name: str) -> tuple[str, str]:
        rnd, en, zh = self.rnd, self.en, self.zh
        base = name.rstrip("2")
        if base == "PERSON":
            return "PERSON", f"{en.first_name()} {en.last_name()}"
        if base == "ZH_PERSON":
            return "PERSON", zh.name()
        if base == "EMAIL":
            return "EMAIL_ADDRESS", rnd.choice((en.free_email, en.company_email))()
        if base == "ZH_EMAIL":
            return "EMAIL_ADDRESS", zh.free_email()
        if base == "PHONE":
            area = rnd.choice(US_AREA_CODES)
            exchange = rnd.choice("23456789") + en.numerify("##")
            line = en.numerify("####")
            layout = rnd.choice(("({a}) {e}-{n}", "{a}-{e}-{n}", "+1 {a} {e} {n}", "{a}.{e}.{n}"))
            return "PHONE_NUMBER", layout.format(a=area, e=exchange, n=line)
        if base == "CN_PHONE":
            digits = zh.phone_number()
            style = rnd.randrange(4)
            if style == 1:
                return "CN_PHONE", f"{digits[:3]}-{digits[3:7]}-{digits[7:]}"
            if style == 2:
                return "CN_PHONE", f"+86 {digits[:3]} {digits[3:7]} {digits[7:]}"
            return "CN_PHONE", digits
        if base == "CN_LANDLINE":
            area = rnd.choice(ZH_LANDLINE_AREAS)
            local = rnd.choice("2345678") + "".join(rnd.choice(string.digits) for _ in range(7 if len(area) == 3 else 6))
            return "CN_LANDLINE", rnd.choice((f"{area}-{local}", f"({area}){local}"))
        if base == "CN_ID":
            return "CN_ID", zh.ssn()
        if base == "CN_BANK":
            number = _luhn_complete("62" + "".join(rnd.choice(string.digits) for _ in range(rnd.choice((14, 16)))))
            if rnd.random() < 0.3:
                number = " ".join(number[i : i + 4] for i in range(0, len(number), 4))
            return "CN_BANK", number
        if base == "CARD":
            return "CREDIT_CARD", en.credit_card_number(card_type=rnd.choice(("visa16", "mastercard", "amex", "discover")))
        if base == "IBAN":
            iban = en.iban()
            return "IBAN_CODE", " ".join(iban[i : i + 4] for i in range(0, len(iban), 4)) if rnd.random() < 0.5 else iban
        if base == "IP":
            return "IP_ADDRESS", rnd.choice((en.ipv4_public, en.ipv4_private, en.ipv6))()
        if base == "SSN":
            return "US_SSN", en.ssn()
        if base == "STREET":
            return "STREET_ADDRESS", f"{en.building_number()} {en.last_name()} {rnd.choice(STREET_SUFFIXES)}"
        if base == "CITY":
            return "LOCATION", rnd.choice(EN_CITIES)
        if base == "ZH_CITY":
            return "LOCATION", rnd.choice(ZH_CITIES)
        if base == "CN_ADDRESS":
            address = (
                zh.province() + zh.city_name() + "市" + zh.district() + "区" + rnd.choice(ZH_ROADS)
                + f"{rnd.randint(1, 999)}号"
            )
            if rnd.random() < 0.4:
                address += f"{rnd.randint(1, 20)}栋{rnd.randint(1, 6)}单元{rnd.randint(1, 30)}0{rnd.randint(1, 4)}室"
            return "CN_ADDRESS", address
        raise KeyError(name)


_SLOT = re.compile(r"\{([A-Z_0-9]+)\}")


def fill(template: str, values: Values) -> tuple[str, list[dict]]:
    out, spans, pos, length = [], [], 0, 0
    literal = template.replace("{{", "\x01").replace("}}", "\x02")
    for m in _SLOT.finditer(literal):
        chunk = literal[pos : m.start()].replace("\x01", "{").replace("\x02", "}")
        out.append(chunk)
        length += len(chunk)
        entity, value = values.slot(m.group(1))
        spans.append({"start": length, "end": length + len(value), "entity": entity})
        out.append(value)
        length += len(value)
        pos = m.end()
    out.append(literal[pos:].replace("\x01", "{").replace("\x02", "}"))
    return "".join(out), spans


def build(seed: int = SEED, per_template: int = 6) -> list[dict]:
    values = Values(seed)
    records = []
    for lang, templates in (("en", EN_TEMPLATES), ("zh", ZH_TEMPLATES)):
        for t, template in enumerate(templates):
            for k in range(per_template):
                text, spans = fill(template, values)
                records.append({"id": f"faker-{lang}-{t:02d}-{k}", "lang": lang, "part": "faker", "text": text,
                                "spans": spans})
    for lang, texts in (("en", HAND_EN), ("zh", HAND_ZH)):
        for i, marked in enumerate(texts):
            text, spans = parse_marked(marked)
            records.append({"id": f"hand-{lang}-{i:02d}", "lang": lang, "part": "hand", "text": text, "spans": spans})
    for i, (lang, text) in enumerate(NEGATIVES):
        records.append({"id": f"negative-{lang}-{i:02d}", "lang": lang, "part": "negative", "text": text, "spans": []})
    return records


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=OUT)
    parser.add_argument("--seed", type=int, default=SEED)
    args = parser.parse_args(argv)
    records = build(args.seed)
    for r in records:
        for s in r["spans"]:
            assert r["text"][s["start"] : s["end"]], r
    args.out.parent.mkdir(parents=True, exist_ok=True)
    with open(args.out, "w", encoding="utf-8") as f:
        for r in records:
            f.write(json.dumps(r, ensure_ascii=False) + "\n")
    counts: dict[str, int] = {}
    for r in records:
        for s in r["spans"]:
            counts[s["entity"]] = counts.get(s["entity"], 0) + 1
    print(f"wrote {len(records)} texts, {sum(counts.values())} spans to {args.out}")
    print(", ".join(f"{k}={v}" for k, v in sorted(counts.items())))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
