"""The message bodies ``tieredstore synth`` writes: hex text, or JSON events.

Each kind is a function ``(rng, size) -> bytes`` that returns exactly ``size`` bytes and
draws only from ``rng`` (so a message's body depends only on the spec's seed and its
index, as :func:`tieredstore.hot.synth.generate_messages` promises):

* ``hex``: random hex text, compressible about 2x; the historical default, unchanged.
* ``json``: one JSON object, an order event or a user event, as business producers send:
  the same field names in every message, ids, epoch-millisecond timestamps, enum-like
  status strings, decimal amounts as strings, a nested object, an array of nested
  objects (order lines, page views) that grows with the size, and a free-text ``note``
  that pads the object to the exact size. A size too small for any field is ``{}``
  followed by spaces, still valid JSON; a size below 2 has no JSON form
  (:data:`JSON_MIN_SIZE`; the spec refuses it).
"""

from __future__ import annotations

import random
from collections.abc import Callable
from typing import Final

__all__ = ["BODY_KINDS", "JSON_MIN_SIZE", "body_maker", "hex_body", "json_body"]

BodyMaker = Callable[[random.Random, int], bytes]

#: The smallest JSON body: ``{}``.
JSON_MIN_SIZE: Final = 2

_STATUS: Final = ("CREATED", "PAID", "PACKED", "SHIPPED", "DELIVERED", "CANCELLED", "REFUNDED")
_ORDER_EVENTS: Final = ("order.created", "order.paid", "order.shipped", "order.cancelled")
_USER_EVENTS: Final = ("user.login", "user.logout", "user.signup", "user.profile_updated")
_RESULTS: Final = ("OK", "OK", "OK", "FAILED", "LOCKED")
_CURRENCIES: Final = ("USD", "EUR", "CNY", "GBP", "JPY")
_CHANNELS: Final = ("web", "ios", "android", "mini-program")
_CITIES: Final = (
    ("Hangzhou", "CN"), ("Beijing", "CN"), ("Berlin", "DE"), ("Paris", "FR"),
    ("Austin", "US"), ("Seattle", "US"), ("London", "GB"), ("Osaka", "JP"),
)  # fmt: skip
_PRODUCTS: Final = (
    "steel water bottle", "wireless earbuds", "running shoes", "usb-c cable 2m",
    "green tea 250g", "desk lamp", "phone case", "notebook a5 dotted", "coffee beans 1kg",
)  # fmt: skip
_PATHS: Final = ("/", "/search", "/cart", "/checkout", "/orders", "/p/", "/account", "/help")
_WORDS: Final = (
    "please", "leave", "the", "parcel", "at", "front", "door", "call", "on", "arrival",
    "gift", "wrap", "fragile", "handle", "with", "care", "second", "floor", "ring", "bell",
    "back", "office", "weekend", "delivery", "only", "thanks", "customer", "asked", "for",
    "invoice", "address", "changed", "after", "payment", "retry", "coupon", "applied",
)  # fmt: skip
# ',"note":""': the room the free-text pad needs besides its text.
_NOTE_ROOM: Final = len(',"note":""')


def hex_body(rng: random.Random, size: int) -> bytes:
    """Hex text: realistic-looking and compressible about 2x, like typical payloads."""
    return rng.randbytes((size + 1) // 2).hex()[:size].encode()


def _id(rng: random.Random) -> str:
    return rng.randbytes(16).hex()


def _words(rng: random.Random, size: int) -> str:
    """``size`` characters of lower-case words and spaces (nothing JSON escapes)."""
    text = " ".join(rng.choices(_WORDS, k=size // 4 + 1))
    while len(text) < size:
        text += " " + " ".join(rng.choices(_WORDS, k=size // 4 + 1))
    return text[:size]


def _order(rng: random.Random, ts: int) -> tuple[list[str], str, Callable[[], str]]:
    city, country = rng.choice(_CITIES)
    cents = rng.randint(100, 5_000_000)
    fields = [
        f'"eventType":"{rng.choice(_ORDER_EVENTS)}"',
        f'"eventId":"{_id(rng)}"',
        f'"orderId":{rng.randint(10**11, 10**12 - 1)}',
        f'"userId":{rng.randint(1, 50_000_000)}',
        f'"status":"{rng.choice(_STATUS)}"',
        f'"createdAt":{ts - rng.randint(0, 86_400_000)}',
        f'"updatedAt":{ts}',
        f'"currency":"{rng.choice(_CURRENCIES)}"',
        f'"amount":"{cents // 100}.{cents % 100:02d}"',
        f'"channel":"{rng.choice(_CHANNELS)}"',
        f'"shipping":{{"name":"customer {rng.randint(1, 99_999)}","street":"{rng.randint(1, 999)}'
        f' {rng.choice(_WORDS)} road","city":"{city}","country":"{country}",'
        f'"zip":"{rng.randint(10_000, 99_999)}"}}',
    ]

    def line() -> str:
        r = rng.random
        price = 99 + int(r() * 99_900)
        return (
            f'{{"sku":"SKU-{int(r() * 1_000_000):06d}",'
            f'"title":"{_PRODUCTS[int(r() * len(_PRODUCTS))]}","qty":{1 + int(r() * 5)},'
            f'"price":"{price // 100}.{price % 100:02d}"}}'
        )

    return fields, "items", line


def _user(rng: random.Random, ts: int) -> tuple[list[str], str, Callable[[], str]]:
    city, country = rng.choice(_CITIES)
    fields = [
        f'"eventType":"{rng.choice(_USER_EVENTS)}"',
        f'"eventId":"{_id(rng)}"',
        f'"userId":{rng.randint(1, 50_000_000)}',
        f'"sessionId":"{_id(rng)}"',
        f'"timestamp":{ts}',
        f'"result":"{rng.choice(_RESULTS)}"',
        f'"channel":"{rng.choice(_CHANNELS)}"',
        f'"ip":"10.{rng.randint(0, 255)}.{rng.randint(0, 255)}.{rng.randint(1, 254)}"',
        f'"device":{{"os":"{rng.choice(("android", "ios", "windows", "macos"))}",'
        f'"version":"{rng.randint(9, 17)}.{rng.randint(0, 9)}",'
        f'"model":"m-{rng.randint(100, 999)}"}}',
        f'"geo":{{"city":"{city}","country":"{country}"}}',
    ]

    def view() -> str:
        r = rng.random
        path = _PATHS[int(r() * len(_PATHS))]
        if path == "/p/":
            path += str(1 + int(r() * 999_999))
        return f'{{"path":"{path}","ms":{5 + int(r() * 30_000)},"ts":{ts - int(r() * 600_000)}}}'

    return fields, "pages", view


def json_body(rng: random.Random, size: int) -> bytes:
    """One JSON object (an order or a user event) of exactly ``size`` bytes, ASCII.

    The fields come in a fixed order per event type; those that do not fit are left
    out from the end, then array elements are added while they fit, then the ``note``
    pads to the exact size. ``size`` must be at least :data:`JSON_MIN_SIZE`.
    """
    if size < JSON_MIN_SIZE:
        raise ValueError(f"a JSON body needs at least {JSON_MIN_SIZE} bytes, not {size}")
    ts = 1_700_000_000_000 + rng.randint(0, 10**10)
    fields, array, element = (_order if rng.random() < 0.6 else _user)(rng, ts)
    kept: list[str] = []
    used = 2  # the braces
    for field in fields:
        extra = len(field) + (1 if kept else 0)
        if used + extra + _NOTE_ROOM > size:
            break
        kept.append(field)
        used += extra
    if len(kept) == len(fields):
        head = f'{"," if kept else ""}"{array}":['
        elements: list[str] = []
        grown = used + len(head) + 1  # and the closing ]
        while True:
            item = element()
            extra = len(item) + (1 if elements else 0)
            if grown + extra + _NOTE_ROOM > size:
                break
            elements.append(item)
            grown += extra
        if elements:
            kept.append(f'"{array}":[{",".join(elements)}]')
            used = grown
    room = size - used - _NOTE_ROOM + (0 if kept else 1)  # no comma before a first field
    if room < 0:
        return ("{" + ",".join(kept) + "}").ljust(size).encode()
    kept.append(f'"note":"{_words(rng, room)}"')
    return ("{" + ",".join(kept) + "}").encode()


BODY_KINDS: Final[dict[str, BodyMaker]] = {"hex": hex_body, "json": json_body}


def body_maker(kind: str) -> BodyMaker:
    """The body function of ``kind`` (a key of :data:`BODY_KINDS`); KeyError otherwise."""
    return BODY_KINDS[kind]
