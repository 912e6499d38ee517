"""One error shape for values governance cannot count or the store cannot keep."""

from __future__ import annotations


class FieldValueError(ValueError):
    """A value is unusable; the message starts with the field's name, then says why."""

    def __init__(self, field_name: str, message: str) -> None:
        super().__init__(f"{field_name}: {message}")
        self.field_name = field_name
