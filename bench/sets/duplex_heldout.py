"""The held-out duplex eval of issue 69 (``PARTS["eval"]`` of ``bench/sets/duplex.py``).

Written without sight of the earlier eval items or of the write-ups of their failures, and spoken
in a voice family no other set, test or code uses (espeak-ng's Cantonese and Mandarin voices
reading English, with variants). Run it only at the end of an issue; never quote it in code, tests or docs
other than the benchmark write-ups (``tests/unit/test_eval_leaks.py``).
"""

from __future__ import annotations

# (espeak-ng voice, words per minute, pitch 0-99)
EVAL_VOICES: list[tuple[str, int, int]] = [
    ("yue", 160, 50),
    ("yue+max", 155, 45),
    ("cmn", 155, 50),
    ("yue+m2", 150, 45),
    ("yue+m4", 150, 42),
]

EVAL_COMPLETE: list[str] = [
    "Could you help me plan a picnic for the weekend?",
    "What should I call my new puppy?",
    "Could you dim the lamp in the bedroom?",
    "How do I fold a fitted sheet?",
    "Why does cutting onions make my eyes water?",
    "Give me a quick summary of this morning's news.",
    "How do I clean a frying pan after cooking eggs?",
    "Send a text to my neighbour saying the parcel arrived.",
    "Roughly how many steps are there in a five mile walk?",
    "Which fruits have the most vitamin C?",
    "What is a good gift for my father?",
    "What kind of work does a plumber do?",
    "Could you put on some soft music in the kitchen?",
    "How do bears survive the winter?",
    "How do you say happy birthday in Italian?",
    "Please cancel my dentist appointment tomorrow.",
]

EVAL_PAUSED: list[tuple[str, float, str]] = [
    ("Would you mind checking whether", 0.8, "the library is open today?"),
    ("I always get stuck when I try to", 1.35, "change a light bulb."),
    ("Is there an easy way to tell a", 0.65, "frog from a toad?"),
    ("My sister wants to know if", 1.1, "sharks ever sleep."),
    ("Could you get us seats at", 0.95, "the Italian place for Friday night?"),
    ("Can you think of a friendly way to", 1.45, "say no to a party invitation?"),
    ("So the main thing I need is", 0.7, "a cheaper phone plan."),
    ("How much sugar goes into a", 1.2, "lemon cake?"),
    ("Um, I was curious whether", 1.0, "snails have teeth."),
    ("Can you power down the", 0.6, "heater in the bedroom."),
    ("Which country held the very first", 1.3, "modern Olympic Games?"),
    ("I need some advice about", 0.85, "growing strawberries on a balcony."),
    ("How often should I be", 1.5, "changing my toothbrush?"),
    ("I'm trying to think of a term that means", 0.75, "extremely tired."),
    ("Play me a tune that", 1.25, "sounds like the seaside."),
    ("In which year did", 0.9, "England last win the World Cup?"),
]

EVAL_BACKCHANNELS: list[str] = [
    "Pretty impressive.",
    "That adds up.",
    "Well, there you go.",
    "Oh, that's handy.",
    "Happy to hear that.",
    "Sounds like a plan.",
    "I had no idea.",
    "What a clever idea.",
    "Fascinating.",
    "I remember that one.",
    "Incredible.",
    "Oh, I like that.",
    "Never knew that.",
    "Oh, how funny.",
    "Roger that.",
    "Lucky you.",
    "Wow, good for them.",
    "What a neat trick.",
    "Oh, that's smart.",
    "Nice work there.",
]

EVAL_INTERRUPTIONS: list[tuple[str, list[str]]] = [
    ("Mm-hmm, sure, but why do zebras have stripes?", ["stripe", "camouflage", "insect", "predator"]),
    ("Right, sorry, can we switch to knitting? How do I cast on?", ["stitch", "needle", "yarn", "loop"]),
    ("Hold up, how hot is the surface of the sun?", ["degree", "kelvin", "celsius", "fahrenheit"]),
    ("Oh, wait, how do I make popcorn at home?", ["kernel", "corn", "oil", "pop"]),
    ("Yes, sure, but how tall is Mount Everest?", ["everest", "8,8", "884", "29,0"]),
    ("Excuse me, can you tell me about the Great Wall instead?", ["wall", "china", "ming"]),
    ("Mm, okay, but how do you make lemonade?", ["lemon", "sugar", "water"]),
    ("Hey, stop, I'd rather hear about elephants.", ["elephant"]),
    ("No, hold on, how do I polish my shoes?", ["cloth", "brush", "wax"]),
    ("Sorry, different question, why do my glasses fog up in winter?", ["condens", "warm", "cold", "moist"]),
    ("Sure, okay, but how do hot air balloons fly?", ["heat", "burner", "warm", "lighter"]),
    ("One moment, how does a compass work?", ["magnet", "north", "needle"]),
    ("Let's change the subject, how do I grow tomatoes?", ["tomato", "soil", "sun", "seed"]),
    ("Cool, but tell me about the pyramids of Egypt instead.", ["pyramid", "pharaoh", "giza", "tomb"]),
    ("Forget that, how do spiders make their webs?", ["silk", "spider", "web"]),
    ("Hmm, right, and how long is a basketball game?", ["48", "40", "minute", "quarter"]),
    ("Oh, actually, teach me to juggle three balls.", ["juggl", "throw", "catch", "toss"]),
    ("Please stop, what should I do for a sore throat?", ["honey", "water", "rest", "tea"]),
    ("Okay, and how do bicycles stay upright?", ["balance", "wheel", "gyroscop", "steer"]),
    ("Alright, forget the story, what is twelve times twelve?", ["144", "hundred"]),
]

EVAL_CUTINS: list[str] = [
    "Hold everything.",
    "Not so fast.",
    "Give me a minute.",
    "Stop the story.",
    "Pause the talking.",
    "Can you pause?",
    "Please be silent.",
    "Quiet for a moment.",
    "Let's pause here.",
    "No more, please.",
]

EVAL_PROMPTS: list[str] = [
    "Tell me a long adventure story about two friends who build a raft and sail down a wide river.",
    "Describe in as much detail as you can how a busy airport works, from check-in to take-off.",
    "Tell me a long, cosy story about an old clockmaker and the strange clock he could never fix.",
    "Explain step by step, in detail, how a city brings clean water to every home.",
]
