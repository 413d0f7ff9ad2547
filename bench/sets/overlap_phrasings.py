"""More dev phrasings for the overlap judge's meaning reader (issue 47): written apart from the eval set, by
someone who did not read it; the fit (bench.fit.meaning_fit) speaks them in the dev voices. Dev only: never an
eval part.

Written by helpers that read neither the eval part nor any write-up; 25 of their phrasings were then
removed because the leak matcher (``bench.sets.Item``) found an eval item in them (short common
acknowledgements and cut-ins, which eval holds too); ``tests/unit/test_duplex_set.py`` keeps it so."""

from __future__ import annotations

# Things a listener says while the assistant talks that mean "go on, I'm with you"; none asks it to stop.
DEV_MORE_BACKCHANNELS: list[str] = [
    # minimal tokens, spelled the way a recogniser writes them
    "Mm.", "Oh.", "Oh, okay.", "Oh, right.", "Ah, right.", "Ah, okay.",
    "Mm, yeah.", "Okay, yeah.", "Right, yeah.",
    # agreement
    "Exactly.", "Totally.", "Definitely.", "True.", "So true.", "Agreed.",
    "Precisely.", "Quite right.", "For sure.", "Yeah, exactly.", "I agree.",
    "Tell me about it.", "You're right.",
    "Fair point.",
    # understanding
    "Fair.", "I understand.",
    "Ah, that explains it.", "Oh, I didn't know that.",
    "Okay, got it.", "Ah, I get you.",
    # surprise
    "No way!", "Seriously?", "Oh wow.", "Really?", "Whoa.", "Wow, really?", "You're kidding!", "No kidding!",
    "Get out!", "Are you serious?", "Oh my god.", "Oh my goodness.", "Blimey.", "Huh.",
    "Huh, interesting.", "Gosh.", "Is that right?", "Well, I never.",
    # evaluation
    "Nice one.", "Lovely.", "Amazing.", "Great.", "Brilliant.", "Awesome.",
    "Good for you.", "That's great.", "Oh, lovely.", "Wonderful.", "Fantastic.", "Cool, cool.",
    "Oh, that's clever.", "Spot on.",
    # empathy
    "Oh no.", "Oh dear.", "Ouch.", "Oh no, that's awful.", "Yikes.", "Oof.", "That's rough.", "That sucks.",
    "I'm sorry to hear that.", "Oh, that's a shame.", "What a shame.", "Oh no, poor you.",
    "Ugh, I hate that.",
    # encouragement to go on
    "Go on.", "And then?", "Keep going.", "And?", "Carry on.", "What happened next?",
    "I'm listening.", "Yeah, go on.", "Oh, do tell.",
    # "no" that still agrees or sympathises
    "No, totally.", "No, that's fair.", "No, exactly.", "No doubt.", "No wonder.",
    "Oh no, really?",
    # British and casual variants
    "Right you are.", "Too right.", "Bang on.", "Yeah, fair.",
]

# Short things a listener says to stop the talking assistant or to take the floor.
DEV_MORE_CUTINS: list[str] = [
    # asking for silence
    "Shh.", "Be quiet.", "Enough.", "Quiet, please.", "That's enough.", "Please be quiet.",
    "Zip it.", "Pipe down.", "Shut up.", "Give it a rest.",
    # correcting
    "That's wrong.", "You misunderstood.", "That's not right.", "That's incorrect.", "You've got it wrong.",
    "You misheard me.", "I didn't say that.", "That's not what I meant.",
    # rejecting the content
    "I don't want that.", "Not interested.", "I'm not interested.", "Don't bother.", "Forget it.",
    "Never mind.", "Cancel that.", "Scratch that.",
    # changing direction
    "Let's move on.", "Change of plan.", "Different question.", "Let's talk about something else.",
    "Back up a second.", "Go back.", "Start over.",
    # asking to speak
    "Can I say something?", "Let me finish.", "Listen to me.", "Let me speak.", "Can I jump in?",
    "I have a question.", "Quick question.", "May I interrupt?", "Just a sec.",
    "Hear me out.", "Can I get a word in?",
    # polite openers
    "Pardon me.", "Um, actually...", "Sorry to interrupt.", "Beg your pardon, but...", "Apologies, but...",
    "Forgive me, but...",
    # impatience
    "Skip it.", "Next.", "Get to the point.", "Cut to the chase.",
    "Just tell me the answer.", "Spare me the details.", "I've heard enough.",
    # negations
    "Nope.", "Not that.", "That's not what I asked.", "Nah.", "No thanks.", "Not now.", "No, no, no.",
    "Uh, no.",
    # stop, wait, hold and no used in new ways
    "Stop talking.", "Please stop.", "Hold up.", "Wait, what?", "Wait, wait.", "Stop right there.",
    "Just stop.", "Hang on.", "Hold that thought.", "Stop, stop, stop.", "Wait, go back.",
    "Whoa, whoa, hold on.",
    # start like an acknowledgement, then take the floor
    "Yeah, no, stop.", "Okay, but listen.", "Right, enough of that.", "Yeah, but wait.", "Okay, stop there.",
    "Mm, no.", "Sure, but hang on.", "Right, but actually...", "Alright, alright, enough.",
    "Yeah, okay, moving on.", "Okay, next.",
]

# Questions and reactions about what the assistant is saying that want an answer now: the listener
# takes the floor (added after the first fit: the dev cut-ins asked to stop, none asked about the content).
DEV_MORE_FLOOR_QUESTIONS: list[str] = [
    # clarification questions
    "Why is that?", "Who was that?", "Which one?", "How does that work?", "What does that word mean?",
    "Where is that?", "When was this?", "Who's Marcus again?", "Why would he do that?",
    "What's a drawbridge?", "How do you spell that?", "Which king was that?", "Where did she go?",
    "What year was that?", "Why did they leave?", "How does a volcano erupt?",
    "Who told her that?", "How many were there?",
    "What does photosynthesis mean?", "Which city are we talking about?",
    # challenges and complaints
    "That doesn't sound right.", "I'm bored.", "This is too long.", "I don't understand.",
    "You're going too fast.", "I don't get it.", "Are you sure about that?",
    "That can't be true.", "I think you're mistaken.", "This is boring me.", "You've lost me.",
    "You said the opposite earlier.", "That's way too complicated.", "I'm confused now.",
    "I've heard this one already.", "Honestly, this is dragging on.",
    # requests to change the content
    "Make it shorter.", "Can you explain it simply?", "Give me an example.", "Say it in French.",
    "Speak louder, please.", "Skip to the end.", "Could you use simpler words?", "Tell it like a joke.",
    "Can you make it scarier?", "Give me the short version.", "Put it another way, please.",
    "Could you summarise that for me?", "Can you slow down a bit?", "Make the hero a girl.",
    "Explain it like I'm five.", "Can you turn it up?", "Do a different voice for him.",
    # topic questions
    "Is the dragon friendly?", "How old was she?", "What colour was the boat?", "Does the cat survive?",
    "Was the princess scared?", "What was the wizard's name?", "Is this a true story?",
    "Did he ever find his dog?", "Are there any sharks in it?", "How big was the castle?",
    "Can penguins actually fly?", "Why was the giant so angry?", "Whose house was that?",
    "Where did the ship sink?",
]
