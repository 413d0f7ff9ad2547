"""The turn-taking sets: spoken complete turns and turns with a pause mid-sentence.

- ``EVAL_COMPLETE`` / ``EVAL_PAUSED``: what ``python -m bench turns`` reports on (a whole question
  or request; an unfinished phrase, a pause of 0.6-1.5 s fixed per item, then the rest). Never
  fit weights on them, never quote them in code or a test (``tests/unit/test_eval_leaks.py``).
- ``DEV_COMPLETE`` / ``DEV_OPEN``: the development set the semantic_vad weights are fitted on
  (``python -m bench.fit.turn_fit``) and that tests may use: complete requests, and phrases cut off
  mid-sentence. No phrase in common with the eval part.

Spoken by Debian ``espeak-ng`` with ``VOICES`` (``bench/turn_set.py`` synthesises and caches).
"""

from __future__ import annotations

# (espeak-ng voice, words per minute, pitch 0-99); all clearly intelligible to Whisper.
VOICES: list[tuple[str, int, int]] = [
    ("en-us", 165, 50),
    ("en-gb", 175, 45),
    ("en-us+f3", 155, 60),
    ("en-gb-x-rp+m3", 185, 40),
    ("en-us+m7", 150, 35),
]

EVAL_COMPLETE: list[str] = [
    "What is the capital of Australia?",
    # replaced "How many days are there in a week?" (issue 44): a near-copy of an answers eval item
    "How many teeth does a grown-up have?",
    "Can you suggest a name for my new puppy?",  # replaced "Can you recommend a good book?" (now dev)
    "Please set a timer for ten minutes.",
    "What time does the sun set today?",
    "How long do elephants live?",  # replaced "How many legs does a spider have?" (issue 44): answers eval
    "Who invented the printing press?",  # replaced "Who painted the Mona Lisa?" (issue 44): answers dev
    "How do I boil an egg?",
    "What is the tallest mountain in the world?",
    "Can you help me write an email to my boss?",
    "Why do we yawn?",  # replaced "Why is the sky blue?" (issue 44): a tools dev item
    "Give me three ideas for dinner tonight.",
    "How far away is the moon?",
    "What is the boiling point of water?",
    "How do you say hello in French?",
    "What should I bring to the beach?",
    "How many players are on a football team?",
    "Tell me a funny story.",
    "Which planet is the biggest?",
    "What is your favourite animal?",
    "Remind me to call my mother tomorrow.",
    "How many hours should I sleep?",
]

# (unfinished phrase, pause in seconds, the rest). Pauses spread over 0.6-1.5 s.
EVAL_PAUSED: list[tuple[str, float, str]] = [
    ("I would like to know the capital of", 0.9, "Australia."),
    # replaced ("Can you tell me how many", "days there are in a year?") (issue 44): an answers dev near-copy
    ("Can you tell me how much", 1.2, "a pair of running shoes costs?"),
    ("My favourite food is, um,", 0.7, "pasta."),
    ("I was wondering if", 1.4, "you could recommend a good film."),
    # replaced ("Could you set a timer for", "fifteen minutes?") (issue 44): its opening is in tools dev
    ("Could you order me", 0.6, "a new phone charger?"),
    # replaced ("What is the best way for me to", "learn a new language?") (issue 44): opens with a dev item
    ("Where would be the nicest place to", 1.1, "go on holiday in spring?"),
    ("Tell me something interesting about", 1.3, "octopuses."),
    ("I need a recipe for a cake with chocolate and", 0.8, "strawberries."),
    ("Who was the first person to", 1.0, "walk on the moon?"),
    ("How long does it take to fly from London to", 1.5, "New York?"),
    ("Can you give me some tips on", 0.65, "saving money?"),
    ("I think I want to go to the cinema but", 1.25, "I do not know what to watch."),
    ("What is the difference between a", 0.85, "cat and a dog?"),
    ("So, uh,", 1.05, "what is the weather usually like in Spain?"),
    ("Please remind me to buy", 1.35, "milk and bread."),
    ("Why is the ocean", 0.75, "salty?"),
    ("If I leave now, will I get there before", 1.15, "the shop closes?"),
    ("My sister asked me whether", 0.95, "bananas grow on trees."),
    ("I have been trying to figure out how to", 1.45, "fix my bike chain."),
    ("Could you explain the rules of", 0.7, "chess to me?"),
    ("What would happen if the", 1.2, "moon disappeared?"),
    ("I want to plant some flowers, maybe", 0.9, "roses or tulips."),
]

DEV_COMPLETE: list[str] = [
    "Where is the nearest train station?", "What is two plus two?", "Tell me a joke.", "Thanks, that's all.",
    "How old is the universe?", "Play some relaxing music.", "What does a cat eat?", "Is it going to rain tomorrow?",
    "Turn off the lights in the kitchen.", "How do airplanes fly?", "What's the weather like in Paris?",
    "Can you spell the word necessary?", "Who invented the telephone?", "I need a recipe for pancakes.",
    "Translate good morning into Spanish.", "How many continents are there?", "What year did the war end?",
    "Is coffee bad for you?", "Read me the news.", "Where do penguins live?", "What is the speed of light?",
    "Call my brother.", "How tall is the Eiffel tower?", "What should I cook tonight?", "Open the garage door.",
    "Why do leaves change colour?", "Can you help me with my homework?", "What is a black hole?",
    "Hello, how are you?", "Good night.",
    # added with the last-word confidence cue
    "Set an alarm for seven.", "Turn the volume down.", "What is the date today?", "How do I make tea?",
    "Who wrote Hamlet?", "Show me the weather for the weekend.", "What is the square root of nine?",
    "Play the next song.", "Where did I park my car?", "How many ounces are in a pound?",
    # moved from the eval part (issue 30): a test has quoted it since the weights' first fit
    "Can you recommend a good book?",
]
DEV_OPEN: list[str] = [
    "I would really like to visit", "Could you tell me the name of the", "My brother and", "What is the best",
    "I was thinking about going to", "Can you remind me to", "The problem is that", "Please add eggs and",
    "Do you think that", "How much does it cost to", "I'm looking for a restaurant that", "Tell me more about",
    "So, um,", "What happens when you", "I need to know whether", "Could you find me a", "Where can I buy",
    "Yesterday I went to the", "Is there a way to", "I forgot to", "What is the population of", "Let me think, uh,",
    "Can you play a song by", "How long should I", "My favourite colour is", "Show me pictures of",
    "I'd like to order a", "Who is the president of", "Give me directions to the", "It depends on whether",
    # added with the last-word confidence cue
    "Could you book a table for", "I'd like to listen to some", "Send a message to my",
    "What is the weather going to be like on", "Can you turn up the", "Put the kettle on and",
    "I need to buy a present for", "How do I get from the station to", "Tell me the story of the",
    "Remind me at five to call",
]
