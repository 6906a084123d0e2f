"""Look-alike characters folded to the ASCII they imitate, one character for one (standard library only).

A marker that fences recalled memory or starts a chat-template turn (``</memcairn-memory>``, ``<|im_start|>``,
``</system>``) can be forged with characters that only look like its own: ``‹/memcairn‐memory>`` (a single
angle quote, U+2010 hyphen), a Cyrillic ``е``, fullwidth ``＜``. ``fold`` maps such characters to the ASCII
character they imitate, as Unicode's skeletons (UTS #39) do, so one pattern over the folded text finds every
spelling. Each character is replaced by exactly one, so a match in the folded text is at the same place in the
original.

Why a table of our own and no library: the hooks import this module (stdlib only, ~20 ms budget per event);
the PyPI packages that carry the confusables data (``confusable-homoglyphs``, ``confusables``) answer "is this
string confusable" or list variants, not a position-preserving fold, and would put their data files on every
hook's path. Only the characters markers are made of matter here: ASCII letters, ``< > / \\ | [ ] - _``.

Where the table comes from:

- NFKC compatibility forms, generated with ``unicodedata.normalize("NFKC", c)`` (Unicode 14.0, Python 3.11)
  for every code point whose normal form is one of those characters: the fullwidth forms (U+FF01-FF5E), the
  mathematical alphanumerics (U+1D400-1D6A3, 13 alphabets of A-Z a-z), circled letters (U+24B6-24E9) and
  small forms are ranges (``_RANGES``); the other 69 lower-case letters and brackets are listed in ``_NFKC``.
- Visual confusables that NFKC keeps apart, from UTS #39's ``confusables.txt``, for the same characters:
  Cyrillic, Greek, Armenian and Latin-extension letters, dashes and hyphens, angle brackets and quotation
  marks, slashes and vertical bars (``_CONFUSABLE``).
"""

from __future__ import annotations

import string

# (first code point, last code point, the ASCII they map to, in order, repeated)
_RANGES: tuple[tuple[int, int, str], ...] = (
    (0xFF01, 0xFF5E, "".join(chr(c) for c in range(0x21, 0x7F))),  # fullwidth ASCII
    (0x1D400, 0x1D6A3, string.ascii_uppercase + string.ascii_lowercase),  # mathematical alphanumerics
    (0x24B6, 0x24CF, string.ascii_uppercase),  # circled capitals
    (0x24D0, 0x24E9, string.ascii_lowercase),  # circled small letters
)
# The remaining single-character NFKC forms of lower-case letters and brackets (generated, see above).
_NFKC: dict[str, str] = {
    "a": "ªᵃₐ", "b": "ᵇ", "c": "ᶜⅽ", "d": "ᵈⅆⅾ", "e": "ᵉₑℯⅇ", "f": "ᶠ", "g": "ᵍℊ", "h": "ʰₕℎ",
    "i": "ᵢⁱℹⅈⅰ", "j": "ʲⅉⱼ", "k": "ᵏₖ", "l": "ˡₗℓⅼ", "m": "ᵐₘⅿ", "n": "ⁿₙ", "o": "ºᵒₒℴ", "p": "ᵖₚ",
    "r": "ʳᵣ", "s": "ſˢₛ", "t": "ᵗₜ", "u": "ᵘᵤ", "v": "ᵛᵥⅴ", "w": "ʷ", "x": "ˣₓⅹ", "y": "ʸ", "z": "ᶻ",
    "<": "\ufe64", ">": "\ufe65", "-": "\ufe63", "\\": "\ufe68", "[": "\ufe47", "]": "\ufe48",
    "_": "\ufe33\ufe34\ufe4d\ufe4e\ufe4f",
}
# Visual confusables NFKC does not fold (UTS #39 confusables.txt, the characters of markers).
_CONFUSABLE: dict[str, str] = {
    "a": "\u0430\u0251\u03b1\u237a",  # Cyrillic а, Latin alpha, Greek alpha, APL alpha
    "c": "\u0441\u03f2\u1d04\u2ca5",  # Cyrillic с, Greek lunate sigma, small capital C, Coptic
    "d": "\u0501\u13e7\u146f",  # Cyrillic komi de, Cherokee, Canadian syllabics
    "e": "\u0435\u04bd\u212e\u0454",  # Cyrillic е, abkhasian che, estimated sign, Ukrainian ie
    "h": "\u04bb\u0570\u13c2",  # Cyrillic shha, Armenian ho, Cherokee
    "i": "\u0456\u03b9\u0131\u0269\u04cf\u13a5",  # Ukrainian і, Greek iota, dotless i, Latin iota
    "j": "\u0458\u03f3",  # Cyrillic је, Greek yot
    "k": "\u03ba\u043a",  # Greek kappa, Cyrillic ka (lower-case look-alikes)
    "l": "\u04cf\u01c0\u05c0",  # Cyrillic palochka, dental click, Hebrew paseq
    "m": "\u043c",  # Cyrillic em (small capital shape)
    "n": "\u0578\u057c\u03b7",  # Armenian vo, ra, Greek eta
    "o": "\u043e\u03bf\u0585\u03c3\u0c02\u0d20",  # Cyrillic о, Greek omicron, Armenian oh, Greek sigma, ...
    "p": "\u0440\u03c1\u2374",  # Cyrillic р, Greek rho, APL rho
    "r": "\u0433\u1d26\u2c85",  # Cyrillic г, small capital gamma, Coptic gamma
    "s": "\u0455\ua731\u01bd",  # Cyrillic ѕ, small capital S, tone five
    "t": "\u03c4\u1d1b",  # Greek tau, small capital T
    "u": "\u03c5\u057d\u1d1c\u028b",  # Greek upsilon, Armenian seh, small capital U, Latin v with hook
    "v": "\u03bd\u0475\u05d8",  # Greek nu, Cyrillic izhitsa, Hebrew tet
    "x": "\u0445\u04b3\u2a2f",  # Cyrillic ха, ha with descender, cross product
    "y": "\u0443\u04af\u03b3\u10e7",  # Cyrillic у, straight u, Greek gamma, Georgian
    "-": "\u2010\u2011\u2012\u2013\u2014\u2043\u2212\u02d7\u2796\u2cba\u30fc\u4e00\u1680",  # hyphens, dashes, minus
    "_": "\u2017\u02cd",  # double low line, modifier low macron
    "<": "\u2039\u3008\u2329\u27e8\u02c2\u1438\u16b2\u276e",  # single angle quote, angle brackets, ...
    ">": "\u203a\u3009\u232a\u27e9\u02c3\u1433\u276f",
    "/": "\u2044\u2215\u2571\u29f8\u1735\u2cc6\u2f03\u3033\u30ce",  # fraction slash, division slash, ...
    "\\": "\u2216\u29f5\u29f9\u2572\u3035\u31d4",  # set minus, reverse solidus operator, ...
    "|": "\u2223\u2502\u23d0\u2758\u01c0\u05c0\u07c0\uffe8",  # divides, box drawing, ...
    "[": "\u2772\u3014\u27e6",  # light tortoise shell bracket, ...
    "]": "\u2773\u3015\u27e7",
}


def _table() -> dict[int, str]:
    table: dict[int, str] = {}
    for first, last, targets in _RANGES:
        for offset in range(last - first + 1):
            table[first + offset] = targets[offset % len(targets)]
    for source in (_NFKC, _CONFUSABLE):
        for target, chars in source.items():
            for char in chars:
                table.setdefault(ord(char), target)
    return table


_TABLE = _table()


def fold(text: str) -> str:
    """``text`` with every look-alike of a marker character replaced by that ASCII character; the same length,
    so a position in the result is the same position in ``text``."""
    return text.translate(_TABLE) if not text.isascii() else text


def imitating(chars: str) -> str:
    """``chars`` and every character ``fold`` turns into one of them: a text holding none of these holds none of
    ``chars`` once folded (tested without folding it)."""
    return chars + "".join(chr(code) for code, target in _TABLE.items() if target in chars)
