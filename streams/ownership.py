"""Who owns a schedules partition, carried in the metadata of the offsets a ticker commits.

Every firing transaction commits an offset for every owned partition (that commit is the
fence), so the offset's metadata is as fresh as the owner's last transaction and costs nothing
extra. `kairos partitions` reads it back with the committed offsets.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from dataclasses import fields as dataclass_fields
from datetime import datetime


@dataclass(frozen=True)
class OwnershipInfo:
    instance: str
    host: str
    since: datetime
    """When this owner was assigned the partition."""
    schedules: int
    next_due: datetime | None
    last_fire_lateness_ms: int | None
    """Due instant to committed fire, for the last occurrence fired on this partition."""
    changelog_offset: int | None
    """The changelog offset just past this transaction's records on the partition (or past the
    owner's restore when it wrote none): a later owner's restore reads at least that far. The
    changelog's end minus it is the lag."""

    def encode(self) -> str:
        # Shallow: asdict deep-copies every value, per partition per transaction.
        fields = {field.name: getattr(self, field.name) for field in dataclass_fields(self)}
        fields["since"] = self.since.isoformat()
        fields["next_due"] = self.next_due.isoformat() if self.next_due else None
        return json.dumps(fields, separators=(",", ":"))

    @classmethod
    def decode(cls, text: str | None) -> OwnershipInfo | None:
        """The info in an offset's metadata; `None` for metadata Kairos did not write."""
        if not text:
            return None
        try:
            fields = json.loads(text)
            fields["since"] = datetime.fromisoformat(fields["since"])
            if fields["next_due"] is not None:
                fields["next_due"] = datetime.fromisoformat(fields["next_due"])
            return cls(**fields)
        except (ValueError, TypeError, KeyError):
            return None
