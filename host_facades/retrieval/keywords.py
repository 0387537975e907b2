"""The multilingual conversational keyword fallback (upstream `host/query-expansion.ts`):
stop-word-filtered keywords in seven languages, CJK unigrams and bigrams. Pure.
"""

from __future__ import annotations

import re
import unicodedata




KEYWORD_FALLBACK_SEARCH_TERM_LIMIT = 6


# ---------------------------------------------------------------------------------------------
# Conversational keyword fallback (upstream `host/query-expansion.ts`)
# ---------------------------------------------------------------------------------------------

STOP_WORDS_EN = frozenset("""a an the this that these those i me my we our you your he she it they them is are was were be
been being have has had do does did will would could should can may might in on at to for of with by from about into
through during before after above below between under over and or but if then because as while when where what which
who how why yesterday today tomorrow earlier later recently ago just now thing things stuff something anything
everything nothing please help find show get tell give""".split())
STOP_WORDS_ES = frozenset("""el la los las un una unos unas este esta ese esa yo me mi nosotros nosotras tu tus usted
ustedes ellos ellas de del a en con por para sobre entre y o pero si porque como es son fue fueron ser estar haber
tener hacer ayer hoy mañana antes despues después ahora recientemente que qué cómo cuando cuándo donde dónde porqué
favor ayuda""".split())
STOP_WORDS_PT = frozenset("""o a os as um uma uns umas este esta esse essa eu me meu minha nos nós você vocês ele ela
eles elas de do da em com por para sobre entre e ou mas se porque como é são foi foram ser estar ter fazer ontem hoje
amanhã antes depois agora recentemente que quê quando onde porquê favor ajuda""".split())
STOP_WORDS_AR = frozenset("""ال و أو لكن ثم بل أنا نحن هو هي هم هذا هذه ذلك تلك هنا هناك من إلى الى في على عن مع بين ل ب ك
كان كانت يكون تكون صار أصبح يمكن ممكن بالأمس امس اليوم غدا الآن قبل بعد مؤخرا لماذا كيف ماذا متى أين هل فضلا ساعد""".split()) | {"من فضلك"}
STOP_WORDS_KO = frozenset("""은 는 이 가 을 를 의 에 에서 로 으로 와 과 도 만 까지 부터 한테 에게 께 처럼 같이 보다 마다 밖에 대로 나 나는
내가 나를 너 우리 저 저희 그 그녀 그들 이것 저것 그것 여기 저기 거기 있다 없다 하다 되다 이다 아니다 주다 오다 가다 것 거 등 수 때
곳 중 분 잘 더 또 매우 정말 아주 많이 너무 좀 그리고 하지만 그래서 그런데 그러나 또는 그러면 왜 어떻게 뭐 언제 어디 누구 무엇 어떤
어제 오늘 내일 최근 지금 아까 나중 전에 제발 부탁""".split())
STOP_WORDS_JA = frozenset("""これ それ あれ この その あの ここ そこ あそこ する した して です ます いる ある なる できる の こと
もの ため そして しかし また でも から まで より だけ なぜ どう 何 いつ どこ 誰 どれ 昨日 今日 明日 最近 今 さっき 前 後""".split())
STOP_WORDS_ZH = frozenset("""我 我们 你 你们 他 她 它 他们 这 那 这个 那个 这些 那些 的 了 着 过 得 地 吗 呢 吧 啊 呀 嘛 啦 是 有 在 被 把 给
让 用 到 去 来 做 说 看 找 想 要 能 会 可以 和 与 或 但 但是 因为 所以 如果 虽然 而 也 都 就 还 又 再 才 只 之前 以前 之后 以后 刚才
现在 昨天 今天 明天 最近 东西 事情 事 什么 哪个 哪些 怎么 为什么 多少 请 帮 帮忙 告诉""".split())
_ALL_STOP = STOP_WORDS_EN | STOP_WORDS_ES | STOP_WORDS_PT | STOP_WORDS_AR | STOP_WORDS_ZH | STOP_WORDS_KO | STOP_WORDS_JA
_KO_PARTICLES = sorted("에서 으로 에게 한테 처럼 같이 보다 까지 부터 마다 밖에 대로 은 는 이 가 을 를 의 에 로 와 과 도 만".split(),
                       key=len, reverse=True)

_SEGMENT_SPLIT = re.compile(r"[\s]+")
_JP_KANA = re.compile("[\u3040-\u30ff]")
_JP_PARTS = re.compile("[a-z0-9_]+|[\u30a0-\u30ffー]+|[\u4e00-\u9fff]+|[\u3040-\u309f]{2,}")
_HAN = re.compile("[\u4e00-\u9fff]")
_HAN_ONLY = re.compile("^[\u4e00-\u9fff]+$")
_HANGUL = re.compile("[\uac00-\ud7af\u3131-\u3163]")
_ASCII_ALPHA = re.compile("^[a-zA-Z]+$")
_DIGITS = re.compile(r"^\d+$")


def is_stop_word(token: str) -> bool:
    return token in _ALL_STOP


def _split_segments(text: str) -> list[str]:
    # split on whitespace and Unicode punctuation (\p{P}); symbols stay inside segments
    out: list[str] = []
    cur: list[str] = []
    for ch in text:
        if ch.isspace() or unicodedata.category(ch).startswith("P"):
            if cur:
                out.append("".join(cur))
                cur = []
        else:
            cur.append(ch)
    if cur:
        out.append("".join(cur))
    return out


def _strip_ko_particle(token: str) -> str | None:
    for particle in _KO_PARTICLES:
        if len(token) > len(particle) and token.endswith(particle):
            return token[: -len(particle)]
    return None


def _useful_ko_stem(stem: str) -> bool:
    if re.search("[\uac00-\ud7af]", stem):
        return len(stem) >= 2
    return bool(re.fullmatch("[a-z0-9_]+", stem, re.IGNORECASE))


def _expansion_tokens(text: str, tokenizer: str) -> list[str]:
    trigram = tokenizer == "trigram"
    tokens: list[str] = []
    for seg in _split_segments(text.lower()):
        if _JP_KANA.search(seg):
            for part in _JP_PARTS.findall(seg):
                tokens.append(part)
                if _HAN_ONLY.match(part) and not trigram:
                    tokens.extend(part[i : i + 2] for i in range(len(part) - 1))
        elif _HAN.search(seg):
            chars = [c for c in seg if _HAN.match(c)]
            if trigram:
                tokens.append("".join(chars))
            else:
                tokens.extend(chars)
                tokens.extend(chars[i] + chars[i + 1] for i in range(len(chars) - 1))
        elif _HANGUL.search(seg):
            stem = _strip_ko_particle(seg)
            stem_stop = stem is not None and stem in STOP_WORDS_KO
            if seg not in STOP_WORDS_KO and not stem_stop:
                tokens.append(seg)
            if stem and stem not in STOP_WORDS_KO and _useful_ko_stem(stem):
                tokens.append(stem)
        else:
            tokens.append(seg)
    return tokens


def _valid_keyword(token: str) -> bool:
    if not token:
        return False
    if _ASCII_ALPHA.match(token) and len(token) < 3:
        return False
    if _DIGITS.match(token):
        return False
    if all(unicodedata.category(c)[0] in "PS" for c in token):
        return False
    return True


def extract_keywords(query: str, tokenizer: str = "unicode61") -> list[str]:
    """``extractKeywords``: stop-word-filtered keywords (7 languages, CJK unigrams + bigrams)."""
    out: list[str] = []
    seen: set[str] = set()
    for token in _expansion_tokens(query or "", tokenizer):
        if is_stop_word(token) or not _valid_keyword(token) or token in seen:
            continue
        seen.add(token)
        out.append(token)
    return out


def probe_keywords(query: str, tokenizer: str = "unicode61") -> list[str]:
    """Every keyword of ``query`` but the whole query itself: the OR probe's terms (capped by the
    caller), whose first 6 are :func:`fallback_terms`."""
    whole = (query or "").strip().lower()
    return [k for k in extract_keywords(query, tokenizer) if k != whole]


def fallback_terms(query: str, tokenizer: str = "unicode61") -> list[str]:
    """Keywords for the extra probes: not the whole query itself, at most 6."""
    return probe_keywords(query, tokenizer)[:KEYWORD_FALLBACK_SEARCH_TERM_LIMIT]
