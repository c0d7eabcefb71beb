"""Deterministic test corpora for the tokenizer conformance fixtures and the benchmark.

build_corpus(specials, seed) -> list of bytes (texts; a few are invalid UTF-8 on purpose)
bench_text(size, seed)       -> str, a multilingual text of about `size` UTF-8 bytes

Covers shared/spec/tokenizers.md section 7.2: prose, whitespace runs, contractions,
digits, accents (precomposed and decomposed), many scripts, emoji / ZWJ / flags / VS16,
odd spaces and controls, private use, astral letters, code, URLs, LaTeX, special tokens
inside text (exact, adjacent, one char changed), invalid UTF-8 and very long words.
"""
import random

SENTENCES = [
    "The quick brown fox jumps over the lazy dog.",
    "Hello world! How's it going? I'm fine, you're late, we've won, they'll see, he'd go.",
    "IT'S A TEST: DON'T PANIC, WE'LL BE FINE; YOU'VE GOT THIS.",
    "Der schnelle braune Fuchs springt über den faulen Hund. Straße, Größe, Äpfel.",
    "Le cœur a ses raisons que la raison ne connaît point. « Très bien », dit-il.",
    "¿Dónde está la biblioteca? ¡Qué día tan bonito! El niño comió piña.",
    "Съешь же ещё этих мягких французских булок, да выпей чаю.",
    "Ξεσκεπάζω την ψυχοφθόρα βδελυγμία. Καλημέρα κόσμε!",
    "敏捷的棕色狐狸跳过了懒狗。我们今天去北京大学学习人工智能。",
    "いろはにほへと ちりぬるを。東京都渋谷区で日本語のテキストを処理します。カタカナもﾊﾝｶｸも。",
    "다람쥐 헌 쳇바퀴에 타고파. 안녕하세요, 반갑습니다! 한국어 문장입니다.",
    "เป็นมนุษย์สุดประเสริฐเลิศคุณค่า กว่าบรรดาฝูงสัตว์เดรัจฉาน",
    "ព្រះរាជាណាចក្រកម្ពុជា ជាតិ សាសនា ព្រះមហាក្សត្រ",
    "नमस्ते दुनिया! हिन्दी में लिखा गया वाक्य। क्षत्रिय ज्ञान श्री।",
    "আমি বাংলায় গান গাই। தமிழ் மொழி அழகானது. తెలుగు భాష.",
    "مرحبا بالعالم! هذه جملة باللغة العربية مع أرقام ١٢٣٤٥٦٧٨٩٠.",
    "שלום עולם! זה משפט בעברית עם ניקוד: בְּרֵאשִׁית בָּרָא.",
    "Tiếng Việt có dấu: Người ta thường nói rằng học, học nữa, học mãi.",
    "Türkçe: Çok güzel bir gün, ağaçlar yeşil. Ελληνικά και Polski: Zażółć gęślą jaźń.",
    "ქართული ენა ძალიან ლამაზია. Հայերեն լեզու. አማርኛ ቋንቋ።",
    "Emoji: 😀😃😄 👍🏽 👨‍👩‍👧‍👦 🏳️‍🌈 🇫🇷🇯🇵🇺🇸 ❤️ ✨ 🤖 1️⃣ #️⃣",
    "Math: ∀x∈ℝ, x² ≥ 0; ∑_{i=1}^{n} i = n(n+1)/2; π ≈ 3.14159; ½ ⅓ Ⅻ ⁴₂",
    "Numbers 1234567890 3.14e-10 -42 +7 0x1F 1,000,000.00 12:30 2024-06-01",
    "def fib(n):\n    return n if n < 2 else fib(n - 1) + fib(n - 2)\n",
    "int main(void) {\n\tprintf(\"%d\\n\", 42);\n\treturn 0;\n}\n",
    "<html><body><div class=\"x\"><table><tr><td>cell</td></tr></table><b>bold</b></div></body></html>",
    "https://example.com/path/to/page?query=1&lang=en#frag and /usr/local/bin/strata --help",
    "\\begin{equation} E = mc^2 \\quad \\frac{a}{b} \\end{equation} $\\alpha + \\beta$",
    "SELECT name, COUNT(*) FROM users WHERE age >= 18 GROUP BY name ORDER BY 2 DESC;",
    "{\"key\": [1, 2.5, null, true], \"nested\": {\"a\": \"b\"}}",
    "Mixed:日本語English한국어Русский中文123abc",
    "naïve café résumé coöperate façade piñata jalapeño Ångström",
    "It’s “smart quotes” — and ‘single’ ones… plus – dashes.",
]

SPACES = [" ", "  ", "   ", "\t", "\n", "\n\n", "\r\n", "\u00a0", "\u3000", "\u2009", "\u200b",
          "\u2028", "\u0085", "\u180e", "\ufeff", "\u202f", " \n ", "\t\t", "\n \n"]

POOL = (
    [chr(c) for c in range(0x20, 0x7F)] * 3
    + list("àáâãäåæçèéêëìíîïñòóôõöøùúûüýÿßœ") + list("αβγδεζηθικλμνξοπρστυφχψω")
    + list("абвгдежзийклмнопрстуфхцчшщъыьэюя") + list("的一是不了人我在有他这中大来上国个到说们为子和你地出道也时年")
    + list("あいうえおかきくけこアイウエオ") + list("가나다라마바사아자차카타파하") + list("กขคงจฉชซ")
    + list("अआइईउऊकखगघ") + ["\u093f", "\u0940", "\u094d"] + list("ابتثجحخدذرزسشصضطظعغفقكلمنهوي")
    + list("אבגדהוזחטיכלמנסעפצקרשת") + list("0123456789٠١٢٣٤٥٦٧٨٩")
    + ["\u0301", "\u0300", "\u0308", "\u0327", "\u0323", "\u0331", "\u034f", "\u07fd", "\u1ab0",
       "\u1dfa", "\u20d0", "\u302a", "\u3099", "\u309a", "\u0e31", "\u0e47"]
    + SPACES + ["\x00", "\x01", "\x1b", "\x7f", "\u00ad", "\ue000", "\U000f0000", "\U0001d400",
                "\U0001d7d8", "\U00020000", "\U0001f600", "\u200d", "\ufe0f", "\U0001f3fd",
                "\U0001f1eb", "\U0001f1f7", "\u2581", "\ufffd", "\u0130", "\u0131", "\u01c5",
                "\u1e9e", "\u2160", "\u00bd", "\U00011f00", "\U0001e030", "\u0889"]
    + ["'s", "'t", "'re", "'ve", "'m", "'ll", "'d", "'S", "'LL", "’s"]
    + [" the", " and", " of", " to", "ing", "tion", " Hello", "world", "<", ">", "/", "<b>", "</b>",
       "<0x41>", "<unk>", "▁▁", "  ", "    ", "\n\n\n"]
)

INVALID = [b"\xff", b"\xc0\xaf", b"\xe6\x97", b"\xe6\x97\xa5\xff", b"\xed\xa0\x80", b"\xf4\x90\x80\x80",
           b"\x80\x80", b"\xf0\x9f\x98", b"a\xe2\x82", b"\xc3", b"\xfe\xfe", b"\xef\xbb\xbf"]


def _mutate(s, rnd):
    """A close variant of a special token: one char changed, dropped or spaced."""
    i = rnd.randrange(len(s))
    op = rnd.randrange(4)
    if op == 0:
        return s[:i] + s[i + 1:]
    if op == 1:
        return s[:i] + " " + s[i:]
    if op == 2:
        return s[:i] + chr(ord(s[i]) ^ 1) + s[i + 1:]
    return s.upper() if s.upper() != s else s + " "


def build_corpus(specials, seed=1234, n_random=2300):
    rnd = random.Random(seed)
    out = []
    add = lambda s: out.append(s.encode("utf-8", "surrogatepass") if isinstance(s, str) else s)
    # Fixed edge cases.
    for s in ["", " ", "  ", "a", "\n", "\t", "\r\n", " " * 40, "\n" * 40, "\t" * 40, "\u2581" * 40,
              "x      y", "Hello world!", "Hello  world", "  leading", "trailing  ", " both ",
              "e\u0301", "\u00e9", "a\u07fd\u0301", "\u1100\u1161\u11a8", "\uac00\u11a8",
              "\u0041\u030a", "\u212b", "\u1e9b\u0323", "\u0071\u0307\u0323", "\ufb01",
              "1234567890" * 3, "3.14e-10", "½ Ⅻ ١٢٣", "'s'S'LL’s 're'VE", "don't DON'T",
              "\x00", "\x00abc\x00", "\u00a0\u3000\u0085\u2028\u180e\u200b\ufeff",
              "\U0001d400\U0001d401\U0001d7d8", "\ue000\uf8ff", "<0x41><unk>\u2581", "<b>bold</b>",
              "a" * 3000, "ab" * 1500, "🙂" * 500, "é" * 800, "1" * 1000, " " * 3000,
              "x" + " " * 1000 + "y", "\n".join(["line"] * 300), "supercalifragilistic" * 100,
              "".join(chr(0x4e00 + i) for i in range(2000))]:
        add(s)
    for s in SENTENCES:
        add(s)
        add(" " + s)
        add(s + "\n")
        add(s.lower())
        add(s.upper())
        add(s.replace(" ", "  "))
        add(s.replace(" ", "\n"))
    for i in range(len(SENTENCES)):
        for _ in range(6):
            a, b = rnd.sample(SENTENCES, 2)
            add(a + rnd.choice(SPACES) + b)
        s = SENTENCES[i]
        for _ in range(4):
            cut = rnd.randrange(len(s))
            add(s[cut:])
            add(s[:cut])
    # Special / added tokens inside text: exact, adjacent, with neighbours, mutated.
    for tok in specials:
        add(tok)
        add(tok + tok)
        add("x" + tok + "y")
        add(" " + tok + " ")
        add("Hello" + tok + "\nworld")
        add(_mutate(tok, rnd))
        add("a" + _mutate(tok, rnd) + "b")
    for _ in range(400):
        k = rnd.randrange(1, 5)
        parts = []
        for _ in range(k):
            parts.append(rnd.choice(specials) if specials and rnd.random() < 0.5 else rnd.choice(SENTENCES)[:rnd.randrange(1, 30)])
            parts.append(rnd.choice(["", "", " ", "\n", "x"]))
        add("".join(parts))
    # Random strings from the code point pool.
    for i in range(n_random):
        n = rnd.choice([1, 2, 3, 5, 8, 13, 30, 60, 120]) if i % 50 else rnd.randrange(500, 4000)
        add("".join(rnd.choice(POOL) for _ in range(n)))
    # Invalid UTF-8 (the engine replaces maximal subparts by U+FFFD, like Python's 'replace').
    for _ in range(120):
        parts = []
        for _ in range(rnd.randrange(1, 5)):
            parts.append(rnd.choice(INVALID) if rnd.random() < 0.5 else rnd.choice(POOL).encode("utf-8"))
        add(b"".join(parts))
    return out


ZH_CHARS = "的一是不了人我在有他这中大来上国个到说们为子和你地出道也时年得就那要下以生会自着去之过家学对可她里后小么心多天而能好都然没日于起还发成事只作当想看文无开手十用主行方又如前所本见经头面公同三已老从动两长知民样现分将外但身些与高意进把法此实回二理美点月明其种声全工己话儿者向情部正名定女问力机给等几很业最间新什打便位因重被走电四第门相次东政海口使教西再平真听世气信北少关并内加化由却代军产入先山五太水万市眼体别处总才场师书比住员九笑性通目华报立马命张活难神数件安表原车白应路期叫死常提感金何更反合放做系计或司利受光王果亲界及今京务制解各任至清物台象记边共风战干接它许八特觉望直服毛林题建南度统色字请交爱让认算论百吃义科怎元社术结六功指思非流每青管夫连远资队跟带花快条院变联言权往展该领传近留红治决周保达办运武半候七必城父强步完革深区即求品士转量空甚众技轻程告江语英基派满式李息写呢识极令黄德收脸钱党倒未持取设始版双历越史商千片容研像找友孩站广改议形委早房音火际则首单据导影失拿网香似斯专石若兵弟谁校读志飞观争究包组造落视济喜离虽坏兴夜图"

WORDS = {
    "en": "the of and to in is that for it with as was on be by this are from at or have an they which one you were her all she there would their we him been has when who will more no if out so said what up its about into than them can only other new some could time these two may then do first any my now such like our over man me even most made after also did many before must through back years where much your way well down should because each just those people".split(),
    "de": "der die und in den von zu das mit sich des auf für ist im dem nicht ein eine als auch es an werden aus er hat daß sie nach wird bei einer um am sind noch wie einem über einen so zum war haben nur oder aber vor zur bis mehr durch man sein wurde sei Straße Größe".split(),
    "fr": "le de un être et à il avoir ne je son que se qui ce dans en du elle au pour pas que vous par sur faire plus dire me on mon lui nous comme mais pouvoir avec tout y aller voir bien où sans tu ou leur homme si deux mari moi vouloir te femme venir quand grand celui si notre devoir là jour prendre même votre tout rien petit encore aussi quelque dont tout mer trouver donner temps ça peu même falloir sous parler alors sentir savoir très déjà où façon œuvre".split(),
    "ru": "и в не на я быть он с что а по это она этот к но они мы как из у который то за свой что весь год от так о для ты же все тот мочь вы человек такой его сказать только или ещё бы себя один как уже до время если сам когда другой вот говорить наш мой знать стать при чтобы дело жизнь кто первый очень два день её новый рука даже во со раз где там под можно ну какой после их работа без самый потом надо хотеть ли слово идти большой должен место иметь ничто".split(),
    "zh": [ZH_CHARS[i:i + 2] for i in range(0, 466, 2)],
    "ja": "私 は 日本語 を 勉強 して います 。 東京 に 住んで いる 友達 が 来ます 。 今日 は いい 天気 です ね 。 コンピューター の プログラム を 書く 。 ありがとう ございます 。".split(),
    "ko": "나는 오늘 학교에 갔다 . 한국어 는 재미있는 언어 입니다 . 우리는 함께 밥을 먹었다 . 컴퓨터 프로그램 을 작성 합니다 .".split(),
    "ar": "في من على إلى أن هذا التي الذي ما لا كان عن مع هذه كل بين قد ذلك بعد عند لم هو حتى إذا كما أو ثم العالم اللغة العربية جميلة جدا".split(),
    "hi": "का के की है में और को से एक यह पर था कि भी हैं लिए नहीं तो हो गया कर जो ही या साथ बहुत अपने हिन्दी भाषा सुंदर है".split(),
    "th": "ที่ และ ใน การ ของ มี เป็น ได้ ไม่ ให้ ว่า จะ มา ไป คน ภาษาไทย สวยงาม มาก".split(),
    "vi": "của và là có được trong cho không những với các người một này đã để khi đến Việt Nam học sinh tiếng".split(),
    "emoji": "😀 😂 🥰 👍 👍🏽 🙏 🔥 ✨ 🎉 ❤️ 👨‍👩‍👧 🏳️‍🌈 🇩🇪 🇯🇵 🤖 🚀".split(),
}

CODE = [
    "for (int i = 0; i < n; i++) {\n    sum += a[i] * b[i];\n}\n",
    "def main(argv):\n    if not argv:\n        raise SystemExit(2)\n    return 0\n",
    "const x = await fetch(`/api/v1/items?id=${id}`);\nconsole.log(x.status);\n",
    "#include <stdio.h>\n#define MAX(a, b) ((a) > (b) ? (a) : (b))\n",
    "<div class=\"row\"><span>Text</span></div>\n",
]


def bench_text(size=1 << 20, seed=7):
    """Mixed-language paragraphs, numbers, code and emoji; about `size` UTF-8 bytes."""
    rnd = random.Random(seed)
    langs = list(WORDS)
    parts, total = [], 0
    while total < size:
        r = rnd.random()
        if r < 0.1:
            p = rnd.choice(CODE)
        elif r < 0.15:
            p = " ".join(str(rnd.randrange(10 ** rnd.randrange(1, 9))) for _ in range(rnd.randrange(2, 10))) + "\n"
        else:
            lang = rnd.choice(langs)
            words = [rnd.choice(WORDS[lang]) for _ in range(rnd.randrange(8, 40))]
            if rnd.random() < 0.3:
                words.insert(rnd.randrange(len(words)), rnd.choice(WORDS["emoji"]))
            sep = "" if lang in ("zh",) else " "
            p = sep.join(words)
            p = p[:1].upper() + p[1:] + rnd.choice([".", "!", "?", ".", "。" if lang in ("zh", "ja") else "."])
            p += rnd.choice(["\n", " ", "\n\n", " "])
        parts.append(p)
        total += len(p.encode("utf-8"))
    data = "".join(parts).encode("utf-8")[:size]
    return data.decode("utf-8", "ignore")
