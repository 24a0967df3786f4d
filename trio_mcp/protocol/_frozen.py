"""Frozen attrs instances built at the cost of plain attribute stores, for the hot path.

A frozen attrs class guards every store with its ``__setattr__``, so its ``__init__`` writes
each field through ``object.__setattr__``: about 0.1 µs a field, several times per task
(its two records, the command and the request it came in, its outcome). :func:`slot_builder`
makes a constructor that fills a *draft* — a plain class of the same slots, whose stores the
interpreter specializes — and then assigns the draft's ``__class__``, which Python allows
between classes whose instances have the same layout: from then on it is an ordinary frozen
instance of the class, equal to one its ``__init__`` made, and no store can change it.

>>> import attrs
>>> @attrs.frozen(weakref_slot=False)
... class Point:
...     x: int
...     y: int = 0
>>> build = slot_builder(Point)
>>> point = build(1, 2)
>>> point, type(point) is Point, point == Point(1, 2)
(Point(x=1, y=2), True, True)
>>> point.x = 5
Traceback (most recent call last):
  ...
attr.exceptions.FrozenInstanceError: can't set attribute
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, TypeVar

import attrs

__all__ = ["slot_builder"]

T = TypeVar("T")


def slot_builder(cls: type[T]) -> Callable[..., T]:
    """A constructor of ``cls``, a frozen and slotted attrs class without a weak reference
    slot (``weakref_slot=False``: that slot would follow the fields and the layouts would
    differ), taking every field positionally, in order, ``init=False`` ones included.

    It applies no default, factory, validator or converter, and runs no
    ``__attrs_post_init__``: the caller passes exactly the values ``cls(...)`` would have
    stored, ``init=False`` fields included (hence TypeError for a class with validators or
    converters, whose ``__init__`` would have changed or refused them)."""
    fields = attrs.fields(cls)  # type: ignore[arg-type]  # TypeError for a class that is not attrs
    if cls.__weakrefoffset__ or not getattr(cls, "__slots__", None):
        raise TypeError(f"{cls.__name__} must be slotted, without a weak reference slot")
    if any(field.validator is not None or field.converter is not None for field in fields):
        raise TypeError(f"{cls.__name__} has validators or converters: build it with its __init__")
    names = [field.name for field in fields]
    draft = type(f"_{cls.__name__}Draft", (), {"__slots__": tuple(names), "__module__": __name__})
    stores = "".join(f"    draft.{name} = {name}\n" for name in names)
    source = (
        f"def build({', '.join(names)}):\n"
        "    draft = Draft()\n"
        f"{stores}"
        "    draft.__class__ = cls\n"  # the same slots: now it is an instance of cls, frozen
        "    return draft\n"
    )
    namespace: dict[str, Any] = {"Draft": draft, "cls": cls}
    exec(compile(source, f"<slot_builder {cls.__qualname__}>", "exec"), namespace)
    build: Callable[..., T] = namespace["build"]
    build.__qualname__ = build.__name__ = f"build_{cls.__name__}"
    build.__doc__ = f"``{cls.__name__}(...)`` of every field, positionally (see :func:`slot_builder`)."
    return build
