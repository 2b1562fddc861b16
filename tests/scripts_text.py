"""Prompts in the scripts a gateway's users write, with their real token counts.

Each is a short prompt of the kind a user sends (a summary, a reply, a rewrite). The counts
were measured offline with OpenAI's tokenizers — o200k (gpt-4o, gpt-5) and cl100k (gpt-4) —
through the ``bpe-openai`` package (its vocabularies ship inside it; nothing downloaded), and
are recorded here so that the tests need no tokenizer.
"""

from __future__ import annotations

#: name → prompt
PROMPTS: dict[str, str] = {
    "zh": (
        "请根据以下客户反馈，总结主要问题并给出三"
        "条改进建议。客户表示，上周购买的笔记本电"
        "脑在开机后经常出现蓝屏，尤其是在同时打开"
        "多个浏览器窗口和视频会议软件的时候。他已"
        "经尝试过重新安装驱动程序，但问题依然存在"
        "。此外，他认为售后服务的响应速度太慢，电"
        "话等待时间超过了四十分钟，而且客服人员无"
        "法提供明确的解决方案。请用简洁、专业的语"
        "气回复，并说明我们将在三个工作日内安排技"
        "术人员上门检测。"
    ),
    "ja": (
        "以下の文章を読んで、要点を三つにまとめて"
        "ください。昨年の秋に開業した駅前の図書館"
        "は、平日の夜も十時まで開いているため、仕"
        "事帰りの会社員や受験勉強をする高校生に人"
        "気があります。館内には静かに読書できる席"
        "のほかに、グループで話し合いができる部屋"
        "もあり、予約はインターネットから簡単にで"
        "きます。ただし、週末は非常に混雑するので"
        "、早めに来ることをおすすめします。また、"
        "来月からは外国語の絵本の貸し出しも始まる"
        "予定です。"
    ),
    "ko": (
        "다음 이메일을 정중한 말투로 다시 작성해 "
        "주세요. 지난주에 주문한 상품이 아직 도착"
        "하지 않았습니다. 배송 조회를 해 보니 물"
        "류 센터에서 사흘째 멈춰 있다고 나옵니다."
        " 고객 센터에 여러 번 전화했지만 연결이 "
        "되지 않았고, 온라인 문의에도 답변이 없습"
        "니다. 이번 주 금요일까지 받지 못하면 주"
        "문을 취소하고 환불을 받고 싶습니다. 빠른"
        " 확인 부탁드립니다."
    ),
    "ru": (
        "Пожалуйста, прочитайте следующий отзыв к"
        "лиента и составьте краткий ответ от имен"
        "и службы поддержки. Клиент пишет, что пр"
        "иложение для онлайн-банкинга после после"
        "днего обновления перестало принимать отп"
        "ечаток пальца, и ему приходится каждый р"
        "аз вводить длинный пароль. Кроме того, у"
        "ведомления о списаниях приходят с задерж"
        "кой в несколько часов, что вызывает у не"
        "го серьёзное беспокойство. Он просит объ"
        "яснить, когда проблема будет исправлена,"
        " и как временно защитить свой счёт."
    ),
    "uk": (
        "Будь ласка, перекладіть цей лист українс"
        "ькою мовою та зробіть його більш офіційн"
        "им. Ми раді повідомити, що ваша заявка н"
        "а участь у конференції була схвалена. Пр"
        "осимо підтвердити свою присутність до кі"
        "нця місяця та надіслати коротку біографі"
        "ю для програми заходу. Якщо у вас виникн"
        "уть запитання, звертайтеся до організаці"
        "йного комітету."
    ),
    "el": (
        "Παρακαλώ γράψτε μια σύντομη περίληψη του"
        " παρακάτω κειμένου. Η πόλη αποφάσισε να "
        "επεκτείνει το δίκτυο ποδηλατοδρόμων κατά"
        " είκοσι χιλιόμετρα μέσα στα επόμενα δύο "
        "χρόνια. Οι κάτοικοι των κεντρικών συνοικ"
        "ιών υποστηρίζουν την πρόταση, ενώ ορισμέ"
        "νοι καταστηματάρχες ανησυχούν ότι θα χαθ"
        "ούν θέσεις στάθμευσης. Ο δήμαρχος υποσχέ"
        "θηκε ανοιχτή διαβούλευση πριν από την τε"
        "λική απόφαση."
    ),
    "ar": (
        "يرجى قراءة النص التالي وتلخيصه في ثلاث ن"
        "قاط رئيسية. أعلنت الشركة عن افتتاح فرع ج"
        "ديد في مدينة الرياض خلال الربع القادم، و"
        "ذلك بهدف تحسين خدمة العملاء في المنطقة ا"
        "لوسطى. وأوضح المدير التنفيذي أن الفرع سي"
        "وفر أكثر من مئتي وظيفة للشباب، وسيضم مرك"
        "زاً للتدريب على المهارات الرقمية. كما أش"
        "ار إلى أن الشركة تخطط لإطلاق تطبيق جديد "
        "يسهل على العملاء متابعة طلباتهم."
    ),
    "he": (
        "אנא סכם את הטקסט הבא בשלושה משפטים. העיר"
        "ייה הודיעה כי החל מהחודש הבא יופעל קו או"
        "טובוס חדש שיחבר בין השכונות הצפוניות למר"
        "כז העיר. הקו יפעל כל עשר דקות בשעות העומ"
        "ס, ובסופי שבוע בתדירות נמוכה יותר. תושבי"
        "ם רבים בירכו על ההחלטה, אך חלקם ביקשו לה"
        "וסיף תחנות ליד בתי הספר."
    ),
    "hi": (
        "कृपया निम्नलिखित पाठ को पढ़कर उसका सारां"
        "श तीन वाक्यों में लिखिए। पिछले सप्ताह शह"
        "र में हुई भारी बारिश के कारण कई इलाकों म"
        "ें पानी भर गया और यातायात पूरी तरह से ठप"
        " हो गया। नगर निगम ने राहत कार्य के लिए अ"
        "तिरिक्त कर्मचारियों को तैनात किया है और "
        "लोगों से अपील की है कि वे अनावश्यक यात्र"
        "ा से बचें। मौसम विभाग के अनुसार अगले दो "
        "दिनों तक और बारिश होने की संभावना है।"
    ),
    "th": (
        "กรุณาสรุปข้อความต่อไปนี้ให้สั้นและชัดเจน"
        " บริษัทของเราจะเปิดตัวผลิตภัณฑ์ใหม่ในเดื"
        "อนหน้า ซึ่งเป็นแอปพลิเคชันสำหรับจัดการค่"
        "าใช้จ่ายในครอบครัว ผู้ใช้สามารถบันทึกราย"
        "รับรายจ่ายได้ง่าย และดูรายงานสรุปประจำเด"
        "ือนได้ทันที นอกจากนี้ยังมีระบบแจ้งเตือนเ"
        "มื่อใช้จ่ายเกินงบประมาณที่ตั้งไว้"
    ),
    "emoji": (
        "Great job team 🎉🎉 ship it 🚀 thanks 🙏"
        " love it ❤\ufe0f 👍👍👍 see you 👋 😂😂 🔥 👨"
        "\u200d👩\u200d👧\u200d👦 🇯🇵 ✅"
    ),
    "en": (
        "Please read the following customer feedb"
        "ack and summarize the main issues, then "
        "give three suggestions for improvement. "
        "The customer says the laptop bought last"
        " week often shows a blue screen after st"
        "artup, especially with several browser w"
        "indows and a video call open at once. He"
        " already tried reinstalling the drivers,"
        " but the problem remains."
    ),
    "fr": (
        "Veuillez lire le commentaire suivant et "
        "résumer les problèmes principaux. Le cli"
        "ent explique que l'ordinateur acheté la "
        "semaine dernière affiche souvent un écra"
        "n bleu après le démarrage, surtout lorsq"
        "u'il ouvre plusieurs fenêtres du navigat"
        "eur et une visioconférence en même temps"
        ". Il a déjà réinstallé les pilotes, mais"
        " le problème persiste, et le service apr"
        "ès-vente a été très lent à répondre."
    ),
    "de": (
        "Bitte lesen Sie das folgende Kundenfeedb"
        "ack und fassen Sie die wichtigsten Probl"
        "eme zusammen. Der Kunde schreibt, dass d"
        "er letzte Woche gekaufte Laptop nach dem"
        " Start häufig einen Bluescreen zeigt, vo"
        "r allem wenn mehrere Browserfenster und "
        "eine Videokonferenz gleichzeitig geöffne"
        "t sind. Er hat die Treiber bereits neu i"
        "nstalliert, aber das Problem besteht wei"
        "terhin."
    ),
    "en_quotes": (
        "The customer’s reply — “it still crashes"
        "” — came after we’d tried everything… Pl"
        "ease draft a short, polite answer that d"
        "oesn’t promise a date we can’t keep."
    ),
}

#: name → (o200k tokens, cl100k tokens)
REAL_TOKENS: dict[str, tuple[int, int]] = {
    "zh": (121, 199),
    "ja": (156, 224),
    "ko": (103, 174),
    "ru": (108, 202),
    "uk": (101, 195),
    "el": (138, 345),
    "ar": (92, 249),
    "he": (97, 259),
    "hi": (101, 349),
    "th": (103, 256),
    "emoji": (44, 65),
    "en": (61, 61),
    "fr": (78, 100),
    "de": (68, 84),
    "en_quotes": (36, 36),
}

#: the scripts whose estimate the task is about (not English and its neighbours)
OTHER_SCRIPTS = ("zh", "ja", "ko", "ru", "uk", "el", "ar", "he", "hi", "th", "emoji")
