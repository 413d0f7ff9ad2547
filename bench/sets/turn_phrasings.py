"""More dev phrasings for semantic_vad's completeness reader (issue 47): written apart from the eval set,
by someone who did not read it; the fit (bench.fit.turn_meaning_fit) speaks them in the dev voices.
Dev only: never an eval part.

Written by a helper that read neither the eval part nor any write-up; 26 of its phrasings were then
removed because the leak matcher (``bench.sets.Item``) found an eval item of some set in them or
found them in an eval item (an opening such as "What is the ... of" begins eval items too);
``tests/unit/test_duplex_set.py`` keeps it so.
"""

from __future__ import annotations

DEV_MORE_COMPLETE: list[str] = [
    "Will it rain this weekend?", "Start a timer for twenty minutes.",
    "No, thanks.", "How come?", "Never mind.", "Cancel that.",
    "Turn it down a bit.", "Can you turn it down?", "What do you make of this?", "Say that again.",
    "Is this the right one?", "Could you check on it?", "Can you look that up for me?",
    "Pick me up at six, please.", "Write that down for me.", "Turn the lights on.", "Switch the fan off.",
    "Let me in.", "I'll take that one.", "Add milk to the list too.", "Can you repeat that, please?",
    "Play the last song again.", "I want to leave now.", "What happened then?", "Put it over there.",
    "Leave it here.", "I think so.", "Why is that?",
    "Remind me to call Mom at five.", "What's on my calendar today?", "Text Jake that I'm running late.",
    "How many ounces are in a cup?", "Who won the game last night?", "Book a table for two at seven.",
    "What time does the pharmacy close?", "Navigate to the nearest gas station.", "Read me the news.",
    "How do you spell necessary?", "Translate good morning into Spanish.", "Pause the music.",
    "Skip this song.", "Louder, please.", "Turn up the heat.", "Set the thermostat to seventy.",
    "Is the store open on Sundays?", "What's fifteen percent of eighty?", "I'd like a refund.",
    "That's not what I asked.", "Okay, got it.", "That works for me.",
    "Can you do that for me?", "Hang up.", "Wake me up at seven tomorrow.", "Shut it off.",
    "Fill it in for me.", "Which one?", "Try the other one.", "Are you sure about that?", "Do it again.",
    "What about this?", "Send it now.", "Who's there?", "Is anyone in?", "Tell me more about it.",
    "Should I bring an umbrella too?", "I'll be there.", "Me too.", "Just that.", "Exactly.", "Go back.",
    "Call my wife.", "Order more paper towels.", "How far is the airport from here?",
    "What does that word mean?", "Can you help me with this?", "Sign me up.", "Count me in.",
    "Let's go with the blue one.", "I changed my mind.", "Please turn off the alarm.",
    "What's the score right now?", "Tell me a joke.", "Lock the front door.", "Did I leave the oven on?",
    "How are you doing today?", "Good night!", "What should I make for dinner?",
    "Find me a good Italian place nearby.", "Schedule a meeting with Priya on Thursday at two.",
    "Is it going to be sunny on Saturday or should we move the picnic inside?",
    "Could you dim the living room lights to half?", "What was that?",
    "Hold on, never mind, I figured it out.", "Check it out.", "Back it up.", "Why not?",
    "Hmm, I guess so.", "I don't need it anymore.",
]

DEV_MORE_OPEN: list[str] = [
    "What is the population of", "Can you remind me to", "I want to reserve a table for", "My brother and",
    "I was thinking maybe", "Set a reminder for uh",
    "I have a quick question", "Basically", "Okay so um", "The problem is", "I need a couple of things",
    "First things first", "Let me see", "What I'd like to know is",
    "Do you happen to know", "Play something by", "What's the best way to", "Send a message to",
    "Add eggs, butter and", "Turn off the", "How much does it cost to", "I'm looking for a",
    "Is it possible to", "Can you find me a recipe for", "Where is the nearest",
    "Remind me that", "Because",
    "But what if", "If it rains tomorrow", "When I get home", "Before you do that",
    "My flight is on", "Book me a flight from Boston to", "Set the temperature to",
    "How many calories are in a", "Can you play the song that goes", "Text Sarah and tell her",
    "I'm going to need", "Give me directions to", "Is there a",
    "The thing I keep forgetting is", "Here's what I want", "Okay, here's the deal", "I have two questions",
    "A few things", "Number one", "To start with", "You know what", "Hold on, let me",
    "Wait, I meant", "It's for my", "I was wondering whether you could", "Do you think it would be better to",
    "Order a large pizza with", "Add an appointment on Friday at", "Schedule a call with",
    "How long does it take to get from", "Why does my", "What are some good", "Show me pictures of",
    "Find restaurants near", "Turn the volume up to", "Can I ask you something", "Here's my question",
    "So the reason I'm asking is", "My question is", "Real quick", "Okay, and then", "After that",
    "Either the red one or", "Not the blue one but", "I want to cancel my", "Read me the latest",
    "Who is the", "Convert fifty dollars into", "Could you please",
    "Let me ask you this", "There's something I need",
    "Our anniversary is coming up and", "The kids are coming over on Saturday, so",
    "Uh, what was the name of that", "I need you to", "Is it true that",
    "Hmm, let me think about", "I forgot to mention", "Which is",
]
