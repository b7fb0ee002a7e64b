"""Seeded synthetic tool-use dialogues for the demo tools and the guessing game: the tiny model's
training data, also the held-out prompts tests and benchmarks roll out (not used at run time).

``scripts/train_tiny_model.py`` trains the tiny model on ``sample_dialogue(rng, split='train')``;
``scripts/eval_tiny_model.py`` measures it on ``heldout_prompts()``. The two splits share the entity
vocabulary (cities, numbers) but not the phrasing templates, fillers or greetings, so the held-out
figures measure new phrasings and new combinations, not memorised prompts.

The data is shaped for a ~1M-parameter model: the model's job is mostly to copy (a city token, the
digits of an expression, the digits of a tool result) and to pick the tool from a keyword, and every
answer has exactly one form.
"""

from __future__ import annotations

import random
from dataclasses import dataclass, field
from typing import Any

from twinkle_agentic.data_format import Message, ToolInfo
from twinkle_agentic.demo.guessing import CORRECT, GUESS_TOOL, HIGH, LOW, judge, search_path
from twinkle_agentic.demo.tools import CALCULATOR_TOOL, WEATHER_TABLE, WEATHER_TOOL, calculate, lookup_weather

CITIES = sorted(WEATHER_TABLE)
SYSTEM_PROMPTS = ["You are a helpful assistant.", "You are a small assistant that can use tools."]

# Phrasing templates: {city}, {a}/{b} are filled from the shared entity vocabulary.
WEATHER_PHRASES = {
    "train": [
        "What is the weather in {city}?",
        "What's the weather like in {city} today?",
        "How is the weather in {city}?",
        "Tell me the weather in {city}.",
        "Weather in {city}?",
        "What is the temperature in {city}?",
        "How hot is it in {city}?",
        "How cold is it in {city} right now?",
        "Can you check the weather in {city}?",
        "I am going to {city}. What is the weather there?",
        "Please get the weather for {city}.",
        "{city} weather please.",
        "Do I need an umbrella in {city}?",
        "Give me the current weather of {city}.",
        "What's it like outside in {city}?",
        "Is it raining in {city}?",
        "weather {city}",
        "Look up the weather in {city} for me.",
    ],
    "heldout": [
        "Could you tell me how the weather is in {city}?",
        "Check the temperature in {city} for me.",
        "What is the weather like today in {city}?",
        "Please tell me the weather of {city}.",
        "How warm is it in {city} today?",
        "I need the weather for {city}.",
    ],
}
TWO_CITY_PHRASES = {
    "train": [
        "What is the weather in {a} and {b}?",
        "Compare the weather in {a} and {b}.",
        "How is the weather in {a} and in {b}?",
        "Tell me the weather in {a} and {b}.",
        "Is it warmer in {a} or in {b}?",
        "Weather in {a} and {b}?",
    ],
    "heldout": [
        "Can you check the weather in {a} and {b}?",
        "Please compare the temperature in {a} and {b}.",
        "What's the weather like in {a} and in {b} today?",
    ],
}
# (template, operator word or symbol) -> the expression is always "{a} <symbol> {b}"
CALC_PHRASES = {
    "train": [
        "What is {a} {op} {b}?",
        "Compute {a} {sym} {b}.",
        "Calculate {a} {sym} {b}",
        "How much is {a} {op} {b}?",
        "Please work out {a} {sym} {b}.",
        "{a} {sym} {b} = ?",
        "What do you get for {a} {op} {b}?",
        "Can you calculate {a} {op} {b}?",
        "Solve {a} {sym} {b}.",
        "I need {a} {op} {b}.",
    ],
    "heldout": [
        "Could you compute {a} {op} {b} for me?",
        "What is the result of {a} {sym} {b}?",
        "Please calculate {a} {sym} {b}.",
        "How much do you get for {a} {sym} {b}?",
    ],
}
OPERATORS = [("plus", "+"), ("minus", "-"), ("times", "*"), ("multiplied by", "*")]
GAME_PHRASES = {
    "train": [
        "Let's play a guessing game.",
        "Guess my number.",
        f"I have a secret number from {LOW} to {HIGH}. Can you find it?",
        "Play the number game with me.",
        "Can you guess the number I picked?",
        "Start the game.",
        "Find the secret number.",
    ],
    "heldout": [
        "Let's play. Try to guess my number.",
        "I picked a number. Can you guess it?",
        "Please find my secret number.",
    ],
}
CHAT_TURNS = {
    "train": [
        ("Hello!", "Hello! I can check the weather or do math for you."),
        ("Hi", "Hello! I can check the weather or do math for you."),
        ("Thanks!", "You are welcome!"),
        ("Thank you.", "You are welcome!"),
        ("Who are you?", "I am a small assistant that can use tools."),
        ("What can you do?", "I can check the weather or do math for you."),
        ("Good morning.", "Hello! I can check the weather or do math for you."),
        ("Bye.", "Goodbye!"),
    ],
    "heldout": [
        ("Hey there!", "Hello! I can check the weather or do math for you."),
        ("Thanks a lot.", "You are welcome!"),
        ("What are you?", "I am a small assistant that can use tools."),
    ],
}
# Prefixes teach the model to ignore what is not the question.
FILLERS = {
    "train": [
        "Hi!",
        "Hello.",
        "Quick question:",
        "Good morning.",
        "I have a meeting later.",
        "My friend asked me this.",
        "Sorry to bother you.",
        "Hey,",
        "OK.",
        "One more thing.",
    ],
    "heldout": ["Hi there.", "Good evening!", "I am planning my week.", "Question:"],
}
SUFFIXES = {"train": ["Thanks!", "Thank you.", "Please.", "Quickly please."], "heldout": ["Thanks a lot!"]}

KINDS = ("weather", "calculator", "two_city", "game", "chat")
# Copying digits (calculator) is the one skill that needs many examples; the weather table is small.
TRAIN_KIND_WEIGHTS = (0.22, 0.40, 0.14, 0.16, 0.08)


@dataclass
class Episode:
    """One user request and the reference exchange answering it."""

    kind: str
    messages: list[Message]  # user message first, then assistant/tool messages
    tools: list[ToolInfo]
    facts: list[str] = field(default_factory=list)  # strings a good final answer contains


def tool_call(name: str, arguments: dict[str, Any], call_id: str) -> dict[str, Any]:
    return {"id": call_id, "type": "function", "function": {"name": name, "arguments": arguments}}


def _assistant_call(name: str, arguments: dict[str, Any], call_id: str) -> Message:
    return {"role": "assistant", "content": "", "tool_calls": [tool_call(name, arguments, call_id)]}


def _tool(content: str, call_id: str) -> Message:
    return {"role": "tool", "tool_call_id": call_id, "content": content}


def weather_answer(city: str) -> str:
    condition, celsius = WEATHER_TABLE[city]
    return f"It is {condition} and {celsius} C in {city}."


def calculator_answer(result: str) -> str:
    return f"The answer is {result}."


def game_answer(number: int) -> str:
    return f"I found it! The number is {number}."


def _phrase(rng: random.Random, split: str, template: str, **values: Any) -> str:
    text = template.format(**values)
    if rng.random() < 0.3:
        text = f"{rng.choice(FILLERS[split])} {text}"
    if rng.random() < 0.2:
        text = f"{text} {rng.choice(SUFFIXES[split])}"
    return text


def _operand(rng: random.Random) -> int:
    digits = rng.choices((1, 2, 3), weights=(0.4, 0.45, 0.15))[0]
    return rng.randint(0 if digits == 1 else 10 ** (digits - 1), 10**digits - 1)


def _weather_tools(rng: random.Random) -> list[ToolInfo]:
    tools = [WEATHER_TOOL, CALCULATOR_TOOL]
    if rng.random() < 0.2:
        tools.reverse()
    return tools


def weather_episode(rng: random.Random, split: str, city: str | None = None) -> Episode:
    city = city or rng.choice(CITIES)
    user = _phrase(rng, split, rng.choice(WEATHER_PHRASES[split]), city=city)
    result = lookup_weather(city)
    condition, celsius = WEATHER_TABLE[city]
    return Episode(
        "weather",
        [
            {"role": "user", "content": user},
            _assistant_call("get_weather", {"city": city}, "call_1_0"),
            _tool(result, "call_1_0"),
            {"role": "assistant", "content": weather_answer(city)},
        ],
        _weather_tools(rng),
        [condition, f"{celsius} C"],
    )


def two_city_episode(rng: random.Random, split: str) -> Episode:
    a, b = rng.sample(CITIES, 2)
    user = _phrase(rng, split, rng.choice(TWO_CITY_PHRASES[split]), a=a, b=b)
    answer = f"{weather_answer(a)} {weather_answer(b)}"
    facts = [f"{WEATHER_TABLE[c][1]} C in {c}" for c in (a, b)]
    return Episode(
        "two_city",
        [
            {"role": "user", "content": user},
            _assistant_call("get_weather", {"city": a}, "call_1_0"),
            _tool(lookup_weather(a), "call_1_0"),
            _assistant_call("get_weather", {"city": b}, "call_2_0"),
            _tool(lookup_weather(b), "call_2_0"),
            {"role": "assistant", "content": answer},
        ],
        _weather_tools(rng),
        facts,
    )


def calculator_episode(rng: random.Random, split: str) -> Episode:
    a, b = _operand(rng), _operand(rng)
    word, symbol = rng.choice(OPERATORS)
    expression = f"{a} {symbol} {b}"
    user = _phrase(rng, split, rng.choice(CALC_PHRASES[split]), a=a, b=b, op=word, sym=symbol)
    result = calculate(expression)
    return Episode(
        "calculator",
        [
            {"role": "user", "content": user},
            _assistant_call("calculator", {"expression": expression}, "call_1_0"),
            _tool(result, "call_1_0"),
            {"role": "assistant", "content": calculator_answer(result)},
        ],
        _weather_tools(rng),
        [result],
    )


def game_episode(rng: random.Random, split: str, target: int | None = None) -> Episode:
    target = target if target is not None else rng.randint(LOW, HIGH)
    user = _phrase(rng, split, rng.choice(GAME_PHRASES[split]))
    messages: list[Message] = [{"role": "user", "content": user}]
    for turn, guess in enumerate(search_path(target), start=1):
        call_id = f"call_{turn}_0"
        messages.append(_assistant_call("guess", {"number": guess}, call_id))
        messages.append(_tool(judge(guess, target), call_id))
    assert messages[-1]["content"] == CORRECT
    messages.append({"role": "assistant", "content": game_answer(target)})
    tools = [GUESS_TOOL] if rng.random() < 0.85 else [GUESS_TOOL, WEATHER_TOOL, CALCULATOR_TOOL]
    return Episode("game", messages, tools, [str(target)])


def chat_episode(rng: random.Random, split: str) -> Episode:
    user, answer = rng.choice(CHAT_TURNS[split])
    tools = _weather_tools(rng) if rng.random() < 0.8 else []
    return Episode(
        "chat",
        [{"role": "user", "content": user}, {"role": "assistant", "content": answer}],
        tools,
        [answer],
    )


BUILDERS = {
    "weather": weather_episode,
    "calculator": calculator_episode,
    "two_city": two_city_episode,
    "game": game_episode,
    "chat": chat_episode,
}


def sample_dialogue(rng: random.Random, split: str = "train") -> dict[str, Any]:
    """A training conversation ``{messages, tools, kind}``: one episode, sometimes after an earlier one.

    A preceding episode of the same tool set teaches the model to answer the latest request, not the
    first one in the context.
    """
    kind = rng.choices(KINDS, weights=TRAIN_KIND_WEIGHTS)[0]
    episode = BUILDERS[kind](rng, split)
    messages = list(episode.messages)
    if kind != "game" and rng.random() < 0.08:
        earlier_kind = rng.choice(["weather", "calculator", "chat"])
        messages = BUILDERS[earlier_kind](rng, split).messages + messages
    if rng.random() < 0.25:
        messages = [{"role": "system", "content": rng.choice(SYSTEM_PROMPTS)}, *messages]
    return {"messages": messages, "tools": episode.tools, "kind": kind}


def heldout_prompts(n_per_kind: int = 40, seed: int = 1234) -> list[Episode]:
    """Prompts in held-out phrasings, with the reference exchange and the facts an answer must carry."""
    rng = random.Random(seed)
    episodes: list[Episode] = []
    for kind in ("weather", "calculator", "two_city", "game", "chat"):
        for i in range(n_per_kind if kind != "chat" else max(1, n_per_kind // 4)):
            if kind == "game":
                episodes.append(game_episode(rng, "heldout", target=LOW + i % (HIGH - LOW + 1)))
            else:
                episodes.append(BUILDERS[kind](rng, "heldout"))
    return episodes
