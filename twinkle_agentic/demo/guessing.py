"""Rules of the number-guessing game behind the demo environment.

The player guesses a secret integer in ``[LOW, HIGH]``; each guess is answered "Too low.",
"Too high." or "Correct!". ``search_path`` is the bisection policy the tiny model was trained to
follow, so it finds any target within ``MAX_GUESSES`` guesses.
"""

from __future__ import annotations

from typing import Any

from twinkle_agentic.data_format import ToolInfo

LOW, HIGH = 1, 10
MAX_GUESSES = 4  # ceil(log2(HIGH - LOW + 1)) guesses suffice with bisection
TOO_LOW, TOO_HIGH, CORRECT = "Too low.", "Too high.", "Correct!"
GAME_OVER = "Error: the game is over."

GUESS_TOOL: ToolInfo = {
    "type": "function",
    "function": {
        "name": "guess",
        "description": f"Guess the secret number from {LOW} to {HIGH}.",
        "parameters": {
            "type": "object",
            "properties": {"number": {"type": "integer", "description": "Your guess."}},
            "required": ["number"],
        },
    },
}


def judge(guess: int, target: int) -> str:
    if guess < target:
        return TOO_LOW
    if guess > target:
        return TOO_HIGH
    return CORRECT


def parse_guess(arguments: dict[str, Any]) -> int | str:
    """The guessed integer, or an ``Error: ...`` string naming what is wrong with the arguments."""
    if "number" not in arguments:
        return "Error: missing argument 'number'."
    value = arguments["number"]
    if isinstance(value, str) and value.strip().lstrip("-").isdigit():
        value = int(value.strip())
    if not isinstance(value, int) or isinstance(value, bool):
        return f"Error: 'number' must be an integer, got {value!r}."
    if not LOW <= value <= HIGH:
        return f"Error: guess a number from {LOW} to {HIGH}."
    return value


def search_path(target: int) -> list[int]:
    """The bisection guesses (middle, rounding down) that end on ``target``."""
    if not LOW <= target <= HIGH:
        raise ValueError(f"target must be in [{LOW}, {HIGH}], got {target}")
    low, high, path = LOW, HIGH, []
    while True:
        guess = (low + high) // 2
        path.append(guess)
        if guess == target:
            return path
        if guess < target:
            low = guess + 1
        else:
            high = guess - 1
