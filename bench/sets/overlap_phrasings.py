"""More dev phrasings for the overlap judge's meaning reader (issue 47): written apart from the eval set, by
someone who did not read it; the fit (bench.fit.meaning_fit) speaks them in the dev voices. Dev only: never an
eval part.

Written by helpers that read neither the eval part nor any write-up; 25 of their phrasings were then
removed because the leak matcher (``bench.sets.Item``) found an eval item in them (short common
acknowledgements and cut-ins, which eval holds too); ``tests/unit/test_duplex_set.py`` keeps it so. Issue 69
removed six more that the matcher, once it saw filler swaps, found near-copying an eval item (three of the
eval of the time, ``dev2`` now, and three of an eval of today: a discourse marker swapped, added or dropped)."""

from __future__ import annotations

# Things a listener says while the assistant talks that mean "go on, I'm with you"; none asks it to stop.
DEV_MORE_BACKCHANNELS: list[str] = [
    # minimal tokens, spelled the way a recogniser writes them
    "Mm.", "Oh, okay.", "Oh, right.", "Ah, right.", "Ah, okay.",
    "Mm, yeah.", "Okay, yeah.", "Right, yeah.",
    # agreement
    "Exactly.", "Definitely.", "True.", "So true.", "Agreed.",
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
    "Let's move on.", "Change of plan.", "Let's talk about something else.",
    "Back up a second.", "Go back.", "Start over.",
    # asking to speak
    "Can I say something?", "Let me finish.", "Listen to me.", "Let me speak.",
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
    "Yeah, no, stop.", "Okay, but listen.", "Yeah, but wait.", "Okay, stop there.",
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
    "Make it shorter.", "Can you explain it simply?", "Give me an example.",
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

# Issue 47, fourteenth stop: more varied phrasings, so the meaning reader must read meaning, not a few
# keywords (evaluations with a verb, echoes of the story, laughter, rhetorical questions; floor-takers
# that open like an acknowledgement). Written by a helper that read only this file and no eval part or
# write-up, avoiding the stop words (the rule takes those); 18 of its 240 were removed because the leak
# matcher found an eval item in them.

# Things a listener says while the assistant tells a story or explains: "go on / I'm following / I react".
DEV_VARIED_BACKCHANNELS: list[str] = [
    # evaluative comments with a subject and verb
    "That sounds lovely.", "That's a good one.", "How interesting.", "What a story.",
    "That sounds like fun.", "Oh, that's beautiful.", "That's so cool.", "What a lovely idea.",
    "That's pretty neat.", "That sounds exciting.", "How clever of her.", "That's a sweet detail.",
    "What a great name.", "That sounds delicious.", "What a brave little fox.",
    # understanding / following
    "I follow.", "Ah, I see.",
    "Got it, got it.", "Okay, that clicks.", "Right, I'm with you.", "Understood.", "Oh, so that's why.",
    "Ah, now I understand.", "That clears it up.", "I'm following you.", "Oh, that's how it works.",
    # agreement in full clauses
    "I think so too.", "Can't argue with that.", "You have a point there.", "Same here.",
    "That's what I always say.", "You're dead right.", "I couldn't agree more.",
    "Couldn't have said it better.", "I feel the same way.", "That's exactly how it is.",
    "You've got that right.", "Hard to disagree with that.",
    # short emotional reactions and exclamations
    "Ha!", "Aw.", "Oh, how sweet.", "Eek.", "Aww, bless.", "Oh my.", "Phew.", "Oh, the poor thing.",
    "Yay!", "Ugh, gross.", "Oh, how sad.", "Aww, that's adorable.", "Eww.", "Goodness me.",
    # laughter and amused reactions
    "Ha ha.", "That's hilarious.", "Hee hee.", "Ha, that's funny.", "Lol.", "Heh.", "Ha ha ha, brilliant.",
    "That cracks me up.", "Oh, that's priceless.", "I'm dying here.", "Ha, love it.", "That's too funny.",
    "Hah, classic.", "What a laugh.", "Haha, good one.",
    # echo-like reactions
    "A dragon, huh.", "In the forest, okay.", "A talking cat, wow.", "Three brothers, right.", "At midnight, huh.",
    "On a boat, okay.", "The old lighthouse, yeah.", "Twenty years later, wow.",
    "In the rain, mm.", "A golden key, huh.", "Back to the village, okay.", "The youngest one, right.",
    "Under the bridge, mm-hmm.", "With just a map, okay.",
    # two-part acknowledgements
    "Oh okay, yeah, yeah.", "Right, right, right.", "Mm, interesting.", "Yeah, yeah, sure.", "Uh-huh, uh-huh.",
    "Okay, okay, cool.", "Mm-hmm, right.", "Ah, yes, yes.", "Sure, sure.", "Oh right, okay, yeah.",
    "Mm, yeah, I see.", "Okay, mm-hmm.", "Yeah, right, okay.",
    # regional / casual / older / younger styles
    "Righto.", "Cheers.", "Word.", "Bet.", "Dope.", "Fair dos.", "Sweet as.", "Ace.", "Grand.", "Right on.",
    "Far out.", "Facts.", "Crikey.", "Jolly good.", "Swell.", "Cool beans.", "Nice, bro.",
    # rhetorical questions that want no answer
    "Isn't that something?", "Who knew?", "Can you imagine?", "Isn't that wild?", "How about that?",
    "Would you believe it?", "Who'd have thought?", "What are the odds?", "Isn't life funny?", "Go figure.",
    "Imagine that.", "Ain't that the truth?", "Isn't that just typical?", "Whoever heard of such a thing?",
]

# Short things a listener says over the talking assistant that take the floor: stop, change, or answer.
DEV_VARIED_FLOOR_TAKERS: list[str] = [
    # looks like an acknowledgement, then takes the floor
    "Okay, but why?", "Right, so what happened to the money?", "Interesting, can you say more about that part?",
    "Yeah, but who's Tom?", "Mm, and how does that help me?", "Sure, but what's the answer?",
    "Uh-huh, so where's the station?", "Okay, okay, what time is it?", "Right, but how much does it cost?",
    "Cool, now tell me the weather.", "Got it. Next question.", "Yeah, yeah, just give me the number.",
    "Fine, but skip the history.", "Alright, so which one should I pick?", "Okay, so what do I do now?",
    "Mm-hmm, but is that safe?", "Wow, but is that actually true?", "Right, right, so what's the catch?",
    "Sure, sure, but who won?", "Ha, okay, but seriously, why?", "Interesting. What about the other one?",
    "Oh, okay, then what's plan B?",
    # requests about the delivery
    "Louder.", "Say that last bit again.", "Repeat that, please.", "Slower, please.", "Can you spell the name?",
    "Read it again from the top.", "Give me the gist.", "Just the headline, please.", "Bullet points, please.",
    "In English, please.", "Turn the volume down.", "Speak up a little.", "Say the number again.",
    "Go back to the part about the dog.", "Once more, slowly.", "Text me that instead.", "Shorter, please.",
    "Rewind a bit.", "Can you write that down for me?",
    # corrections
    "Actually it was Tuesday.", "Actually, I said Boston.", "Her name's Claire, actually.", "That was in 1998.",
    "You mean Friday.", "I meant the other Jack.", "Wrong city.", "I asked for three, actually.",
    "That's the sequel, actually.", "I meant the blue one.", "Correction: it's at six.",
    "He's her uncle, actually.", "In Celsius, please.", "It's Maria with an A.",
    # questions about the content
    "Who's she?", "What's that mean?", "Who's the guy in the hat?", "Where's that again?", "Which bus?",
    "Hm, who won in the end?",
    "How far is that?", "What's a quokka?", "Who said that?", "How old is he now?", "Is that legal?",
    "Whose idea was that?", "What happened to the twins?", "When does it open?", "Huh? What's a tithe?",
    # commands to switch task
    "Set a timer instead.", "Play some music.", "What's the weather tomorrow?", "Call Mum.",
    "Add milk to the list.", "Turn off the lights.", "Remind me at five.", "Switch to the news.",
    "Tell me a joke instead.", "Open my calendar.", "Different story, please.", "Read my messages.",
    "Book a table for two.", "Let's do the quiz now.", "Set an alarm for seven.",
    # impatience
    "Come on, get on with it.", "Hurry up.", "Faster, please.", "Yes, yes, we know.",
    "Ugh, this is taking forever.", "Just the answer, please.", "Blah, blah, blah.", "Skip ahead.",
    "Wrap it up.", "Enough already.", "Less talk, more answer.", "Get to the good part.",
]
