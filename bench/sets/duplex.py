"""The full-duplex sets (issue 34): spoken turns, pauses, backchannels and interruptions.

``python -m bench duplex`` (``bench/duplex/``) reports on them; ``bench/duplex_set.py`` speaks
and caches them. Parts (issue 69):

- ``dev``: tune on it, build word lists from it, quote it in tests.
- ``dev2``: issue 34's eval. Three rules were written after diagnosing failures on it (the hum
  rule, the 400 ms settle, the fragment rule), so it is spent: tuning data, like ``dev``, and the
  figures measured on it before issue 69 are eval-informed. ``fresh``: its phrases in issue 47's
  fresh voices, dev too.
- ``eval`` (``bench/sets/duplex_heldout.py``): written for issue 69 by someone who read neither
  the earlier eval items nor any write-up of their failures, in a voice family no other part or
  set uses. Run only at the end of an issue (every run is logged in ``docs/eval-runs.md``), never
  to diagnose, never quoted in code or a test (``tests/unit/test_eval_leaks.py``); whoever tunes
  the product does not read it.

Kinds:

- ``complete``: a whole question or request (turn latency).
- ``paused``: (unfinished phrase, pause in seconds 0.6-1.5, the rest): answering inside the pause
  is a takeover.
- ``backchannels``: what a listener says while the assistant talks ("mm-hmm", "I see"); it should
  neither stop the reply nor start a new one. The product's backchannel word list is built from
  ``DEV_BACKCHANNELS`` only.
- ``interruptions``: (text, expected keywords): a real barge-in that stops the assistant or
  changes the topic; the next answer should follow it (one of the keywords, lower case, matched
  as a word's beginning: "penguin" matches "penguins"). No keyword is a generic word of the
  question ("planet"): an answer that only echoes it does not follow the question. Some begin like a backchannel ("Yeah, but
  ...", "Okay wait, ...").
- ``cutins``: a word or two asking the assistant to stop ("No.", "Wait."); each must be taken as a
  turn, however short.
- ``prompts``: requests the assistant answers at length, so a backchannel or an interruption lands
  while its audio plays.

Voices (espeak-ng voice, words per minute, pitch 0-99), all intelligible to Whisper (checked
with ``core/cascade/asr.py``): ``DEV_VOICES`` and ``DEV2_VOICES`` share no voice, no base voice
and no variant; the eval part's voices share none with any other part, the turn sets or the
tests.
"""

from __future__ import annotations

from bench.sets import duplex_heldout as heldout

# --- voices -------------------------------------------------------------------------------------

DEV_VOICES: list[tuple[str, int, int]] = [
    ("en-us+klatt2", 165, 50),
    ("en-gb+f5", 160, 60),
    ("en-us+m5", 160, 42),
    ("en-us+f5", 155, 58),
    ("en-gb+m1", 170, 45),
]
DEV2_VOICES: list[tuple[str, int, int]] = [
    ("en-us-nyc+m8", 160, 45),
    ("en-gb-scotland+f2", 155, 55),
    ("en-gb-x-gbclan+m6", 165, 40),
    ("en-029", 155, 50),
    ("en-us-nyc+klatt", 165, 52),
]

# --- dev ----------------------------------------------------------------------------------------

DEV_COMPLETE: list[str] = [
    "How do I change a flat tyre?",
    "What is the largest ocean on Earth?",
    "Can you tell me a fun fact about bees?",
    "Please add apples to my shopping list.",
    "How long should I boil pasta?",
    "What does a koala eat?",
    "Who discovered penicillin?",
    "How many seconds are in a day?",
    "Can you suggest a board game for four people?",
    "What is the opposite of ancient?",
    "How do I keep my houseplants alive?",
    "Why do cats purr?",
    "Give me a word that rhymes with orange.",
    "How warm is the sea in summer?",
    "Start a stopwatch, please.",
    "How do you make a paper plane?",
]

DEV_PAUSED: list[tuple[str, float, str]] = [
    ("Could you tell me the height of", 0.9, "Big Ben?"),
    ("I am trying to decide between", 1.2, "tea and coffee."),
    ("What is the quickest way to", 0.7, "learn to type?"),
    ("My neighbour keeps asking me if", 1.4, "I can feed her fish."),
    ("Please set an alarm for", 0.6, "half past six."),
    ("Do you know a good recipe for", 1.0, "vegetable soup?"),
    ("I think the main reason is, uh,", 1.3, "that it is cheaper."),
    ("How many people live in", 0.8, "Brazil?"),
    ("Tell me a little bit about", 1.1, "the Roman empire."),
    ("Can you explain why the", 1.5, "moon changes shape?"),
    ("I would love to visit", 0.65, "Iceland one day."),
    ("We could either go to the park or", 1.25, "stay at home."),
    ("What is the name of the", 0.85, "longest bridge in Europe?"),
    ("Well, hmm,", 1.05, "how do magnets work?"),
    ("Remind me to water", 1.35, "the plants on Friday."),
    ("Is it true that", 0.75, "goldfish have short memories?"),
]

DEV_BACKCHANNELS: list[str] = [
    "Mm-hmm.",
    "Uh-huh.",
    "Yeah.",
    "Okay.",
    "Right.",
    "I see.",
    "Sure.",
    "Got it.",
    "Oh really?",
    "Wow.",
    "Cool.",
    "Yes.",
    "Nice.",
    "Interesting.",
    "Hmm.",
    "Oh, I see.",
    "Yeah yeah.",
    "Okay, okay.",
    "Right, right.",
    "Of course.",
    "Alright.",
    "Ah.",
]

# Short cut-ins (issue 47): a word or two that asks the talking assistant to stop; each must be
# taken as a turn. The eval ones were written after the judge's stop-word rule and not used to
# change it; most say nothing the rule lists (and no eval one is a word the code names).
DEV_CUTINS: list[str] = [
    "No.",
    "Stop.",
    "Wait.",
    "Hold on.",
    "No, not that one.",
    "Sorry.",
    "Excuse me.",
    "Hang on a sec.",
    "Stop, please.",
    "Wait a moment.",
]

DEV_INTERRUPTIONS: list[tuple[str, list[str]]] = [
    ("Wait, what about penguins?", ["penguin"]),
    ("Sorry, can you tell me about the planet Mars instead?", ["mars", "red planet"]),
    ("No no, stop, how do I cook rice?", ["rice", "water", "cook"]),
    ("Hold on, tell me about the Amazon rainforest.", ["amazon", "rainforest", "forest"]),
    ("Actually, tell me a joke about a chicken.", ["chicken"]),
    ("Stop, I want to hear about volcanoes.", ["volcano", "lava", "erupt"]),
    ("Yeah, but what about tigers?", ["tiger"]),
    ("Okay wait, how do you make pancakes?", ["pancake", "flour", "egg", "batter"]),
    ("Excuse me, how do I make coffee?", ["coffee"]),
    ("Hang on, what is a rainbow made of?", ["rainbow", "light", "colo"]),
    ("Let me stop you there, what is the tallest building in the world?", ["building", "burj", "dubai"]),
    ("Never mind that, what is the biggest city in China?", ["shanghai", "china", "beijing", "chongqing"]),
    ("Sorry to interrupt, how do airplanes fly?", ["airplane", "plane", "wing", "lift"]),
    ("Stop please, tell me about the ocean.", ["ocean", "sea"]),
    ("Right, but how do trains work?", ["train", "rail", "engine"]),
    ("No, I meant chocolate cake.", ["chocolate", "cake"]),
    ("Wait wait, what are clouds made of?", ["cloud", "droplet", "vapo"]),
    ("Mm, actually, can you tell me about dinosaurs?", ["dinosaur"]),
    ("That's enough, what should I eat for lunch?", ["lunch", "sandwich", "salad", "soup"]),
    ("Okay stop, how many moons does Jupiter have?", ["jupiter", "moon"]),
]

DEV_PROMPTS: list[str] = [
    "Tell me a long story about a dragon.",
    "Describe in detail a day in the life of a lighthouse keeper.",
    "Tell me a long bedtime story about a brave little mouse.",
    "Tell me everything you know about the history of bread.",
]

# --- dev2: issue 34's eval part, spent (issue 69) ------------------------------------------------
# Three product rules were written after diagnosing failures on these items (the hum rule, the
# 400 ms settle, the fragment rule), so they are tuning data now: a second dev part. Figures
# measured on them before issue 69 are eval-informed.

DEV2_COMPLETE: list[str] = [
    "What is the deepest lake in the world?",
    "How do I clean a cast iron pan?",
    "Can you name three kinds of clouds?",
    "Please turn on the porch light.",
    "How many strings does a violin have?",
    "What do giraffes eat?",
    "Who built the first car?",
    "How do I sew on a button?",
    "What is a good gift for a teacher?",
    "Why do we have leap years?",
    "How much water should I drink every day?",
    "Can you teach me a card trick?",
    "What makes thunder so loud?",
    "Tell me how rainbows form.",
    "Where do kangaroos live?",
    "What rhymes with window?",
]

DEV2_PAUSED: list[tuple[str, float, str]] = [
    ("Could you find out how deep", 0.9, "the Pacific Ocean is?"),
    ("I can never remember whether", 1.3, "tomatoes are a fruit."),
    ("What is the easiest way to", 0.7, "get rid of hiccups?"),
    ("My daughter wants to know why", 1.4, "zebras have stripes."),
    ("Please add a reminder for", 0.6, "my dentist appointment."),
    ("Do you have any advice about", 1.1, "running a marathon?"),
    ("The thing I really want is, er,", 1.2, "a quiet weekend."),
    ("How many bones are there in", 0.8, "the human body?"),
    ("Give me a short summary of", 1.0, "the French revolution."),
    ("Could you tell me why the", 1.5, "leaves fall in autumn?"),
    ("I have always wanted to learn", 0.65, "the piano."),
    ("We might go camping this weekend unless", 1.25, "it rains."),
    ("Who was the inventor of", 0.85, "the light bulb?"),
    ("So, er, well,", 1.05, "how do bees make honey?"),
    ("Please remind me to pick up", 1.35, "the dry cleaning."),
    ("Is it safe to go swimming right after", 0.75, "eating lunch?"),
]

DEV2_BACKCHANNELS: list[str] = [
    "Mhm.",
    "Yep.",
    "Yup.",
    # replaced "Oh okay." (issue 44), as those marked below: a dev backchannel with a filler, a near-copy
    "I know.",
    "That's true.",
    "Fair enough.",
    "Ooh.",  # replaced "Oh wow." (dev "Wow.")
    "Aha.",  # replaced "Ah okay." (dev "Okay.")
    "Sounds good.",
    "Good point.",  # replaced "Oh nice." (dev "Nice.")
    "Gotcha.",
    "Makes sense.",  # replaced "Mm yeah." (dev "Yeah.")
    "I get it.",
    "Absolutely.",  # replaced "Oh cool." (dev "Cool.")
    "Ah, I see what you mean.",
    "Yeah, totally.",
    "I hear you.",  # replaced "Uh yeah, okay." (dev "Yeah.")
    "Oh, that's neat.",
    "Indeed.",  # replaced "Hm, right." (dev "Right.")
    "Yep, yep.",
]

DEV2_INTERRUPTIONS: list[tuple[str, list[str]]] = [
    ("Hold on, how far away is the planet Saturn?", ["saturn", "ring"]),
    ("No, stop, how do I make pizza?", ["pizza", "dough", "cheese"]),
    ("Stop, I would rather hear about hurricanes.", ["hurricane", "storm", "wind"]),
    ("Mhm, wait, who built the pyramids in Egypt?", ["pyramid", "egypt", "pharaoh"]),
    ("Pardon me, how does a camera work?", ["camera", "lens"]),
    ("Hang on a second, what is the history of the guitar?", ["guitar"]),
    ("One moment, what do astronauts eat in space?", ["astronaut", "space"]),
    ("Oh okay, but can you explain how the internet works?", ["internet", "computer", "network"]),
    ("Forget that, what is the smallest country in the world?", ["country", "vatican"]),
    ("Actually, can you write me a short poem about winter?", ["winter", "snow", "cold", "frost"]),
    ("Let's switch topics, tell me about the Olympics.", ["olympic"]),
    ("Please stop, I need help with my garden.", ["garden", "plant", "soil"]),
    ("Enough about that, recommend me a podcast.", ["podcast"]),
    ("Sure, but how are pencils made?", ["pencil", "graphite"]),
    ("Yep, okay, but what is the fastest animal on land?", ["cheetah", "animal", "fast"]),
    ("Wait, tell me about the moon landing instead.", ["moon", "apollo", "armstrong", "landing"]),
    ("No, stop, what is a good exercise for my back?", ["exercise", "back", "stretch"]),
    ("Yeah, totally, but how does a rocket get into space?", ["rocket", "space", "fuel"]),
    ("Hold it, what is the recipe for lemonade?", ["lemonade", "lemon", "sugar"]),
    ("Stop there, how do I fix a leaking tap?", ["tap", "leak", "washer", "faucet"]),
]

DEV2_CUTINS: list[str] = [
    "Nah, skip that.",
    "Okay, enough of that.",
    "Hush now.",
    "Let me talk.",
    "Cut it out.",
    "May I jump in here?",
    "That's not it.",
    "Nope, wrong one.",
    "Quiet for a second.",
    "Hey, listen.",
]

DEV2_PROMPTS: list[str] = [
    "Tell me a long story about a pirate who lost his ship.",
    "Describe a busy market town in great detail.",
    "Tell me a long story about a robot who learns to paint.",
    "Explain in detail how a city gets its drinking water.",
]

# A fresh family of voices for issue 47's last check, made only for it and run once at the end:
# the eval part's phrases in voices neither part uses (the West Midlands base, which no set or test
# used, with variants no set or test used). Not a part to choose anything on.
FRESH_VOICES: list[tuple[str, int, int]] = [
    ("en-gb-x-gbcwmd+Andy", 160, 48),
    ("en-gb-x-gbcwmd+Annie", 150, 60),
    ("en-gb-x-gbcwmd+Lee", 170, 42),
    ("en-gb-x-gbcwmd+linda", 158, 55),
    ("en-gb-x-gbcwmd+Michael", 165, 38),
]

PARTS: dict[str, dict[str, list]] = {
    "dev": {"voices": DEV_VOICES, "complete": DEV_COMPLETE, "paused": DEV_PAUSED, "backchannel": DEV_BACKCHANNELS,
            "interruption": DEV_INTERRUPTIONS, "cutin": DEV_CUTINS, "prompts": DEV_PROMPTS},
    "dev2": {"voices": DEV2_VOICES, "complete": DEV2_COMPLETE, "paused": DEV2_PAUSED,
             "backchannel": DEV2_BACKCHANNELS, "interruption": DEV2_INTERRUPTIONS, "cutin": DEV2_CUTINS,
             "prompts": DEV2_PROMPTS},
    "eval": {"voices": heldout.EVAL_VOICES, "complete": heldout.EVAL_COMPLETE, "paused": heldout.EVAL_PAUSED,
             "backchannel": heldout.EVAL_BACKCHANNELS, "interruption": heldout.EVAL_INTERRUPTIONS,
             "cutin": heldout.EVAL_CUTINS, "prompts": heldout.EVAL_PROMPTS},
}
PARTS["fresh"] = {**PARTS["dev2"], "voices": FRESH_VOICES}  # dev2's phrases in issue 47's fresh voices: dev now
DEV_PARTS = ("dev", "dev2", "fresh")  # tune, fit and quote on these; "eval" is run at the end of an issue only


def texts(part: str) -> list[str]:
    """Every text of one part as the leak check reads it: a paused item's opening and its whole
    text, an interruption's words (not its keywords)."""
    p = PARTS[part]
    return (list(p["complete"]) + [t for before, _, after in p["paused"] for t in (before, f"{before} {after}")]
            + list(p["backchannel"]) + [t for t, _ in p["interruption"]] + list(p["cutin"]) + list(p["prompts"]))
