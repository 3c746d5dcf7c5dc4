"""Per-client privacy accounting for client-side (local) noise.

An observer of individual uploads sees every upload of a client, in the rounds it took part in;
client sampling gives no amplification against that observer (it knows who uploaded). So each
client's guarantee is the composition of the per-upload events of its own rounds:

    epsilon_k(delta) = RDP( compose_{rounds r with k in S_r} event_r ).

Events are `dp_accounting` events: `GaussianDpEvent(nu)` for Uniform Noise (TF-Privacy's
`GaussianSumQuery` event: noise stddev / clip norm), `GaussianDpEvent(sigma_min / C)` for the
adaptive factory with a noise floor, and `None` for a defense that gives no guarantee (Clip Only,
Directed Uniform, adaptive without a floor): a client with any such upload has no finite epsilon,
reported as None. The neighbouring relation is add/remove of one client's contribution (sensitivity
C, as TF-Privacy and TFF count it); for replace-one adjacency the sensitivity is 2C, i.e. use
noise_multiplier / 2.
"""

from __future__ import annotations

import collections
from collections.abc import Iterable

import dp_accounting

DEFAULT_ORDERS = [1 + x / 10.0 for x in range(1, 100)] + list(range(12, 64)) + [128, 256, 512]


def epsilon_of(event: dp_accounting.DpEvent, delta: float, orders=DEFAULT_ORDERS) -> float:
    """(epsilon at `delta`) of an event, by dp_accounting's RDP accountant."""
    return dp_accounting.rdp.RdpAccountant(orders).compose(event).get_epsilon(delta)


class PerClientAccountant:
    """Records which client uploaded under which event, and reports each client's epsilon."""

    def __init__(self, delta: float = 1e-5, orders=DEFAULT_ORDERS):
        if not 0 < delta < 1:
            raise ValueError(f"delta={delta}: expected 0 < delta < 1")
        self.delta = delta
        self.orders = orders
        # client id -> Counter of (event or None) -> number of uploads.
        self._uploads: dict[object, collections.Counter] = collections.defaultdict(collections.Counter)

    def record_round(self, client_ids: Iterable, event: dp_accounting.DpEvent | None) -> None:
        """One upload under `event` by each of `client_ids`."""
        for k in client_ids:
            self._uploads[k][event] += 1

    def uploads(self, client_id) -> int:
        return sum(self._uploads.get(client_id, {}).values())

    def event(self, client_id) -> dp_accounting.DpEvent | None:
        """The composed event of the client's uploads; None if any upload had no guarantee."""
        counts = self._uploads.get(client_id)
        if not counts:
            return dp_accounting.NoOpDpEvent()
        if None in counts:
            return None
        return dp_accounting.ComposedDpEvent([dp_accounting.SelfComposedDpEvent(e, n) for e, n in counts.items()])

    def epsilon(self, client_id) -> float | None:
        event = self.event(client_id)
        return None if event is None else epsilon_of(event, self.delta, self.orders)

    def state(self) -> list:
        """A JSON-able record of the uploads (for checkpoints): [[client id, [[noise multiplier or
        None, uploads], ...]], ...] in recording order; `from_state` undoes it. Client ids must be
        JSON values (ints, strings); events Gaussian or None."""
        out = []
        for k, counts in self._uploads.items():
            for e in counts:
                if e is not None and not isinstance(e, dp_accounting.GaussianDpEvent):
                    raise TypeError(f"client {k!r}: event {e!r} has no JSON form; expected a GaussianDpEvent or None")
            out.append([k, [[None if e is None else e.noise_multiplier, n] for e, n in counts.items()]])
        return out

    @classmethod
    def from_state(cls, state: list, delta: float = 1e-5, orders=DEFAULT_ORDERS) -> "PerClientAccountant":
        """The accountant whose `state()` is `state`."""
        acc = cls(delta, orders)
        for k, counts in state:
            for multiplier, n in counts:
                acc._uploads[k][None if multiplier is None else dp_accounting.GaussianDpEvent(multiplier)] += int(n)
        return acc

    def summary(self) -> dict:
        """Per-client epsilon, the worst case over clients (None where there is no guarantee or no
        upload), the number of clients that uploaded and the most uploads of one client."""
        per_client = {k: self.epsilon(k) for k in self._uploads}
        finite = [e for e in per_client.values() if e is not None]
        guaranteed = bool(per_client) and len(finite) == len(per_client)
        return {
            "delta": self.delta,
            "max_epsilon": max(finite) if guaranteed else None,
            "clients_with_uploads": sum(1 for k in self._uploads if self.uploads(k) > 0),
            "max_uploads_per_client": max((self.uploads(k) for k in self._uploads), default=0),
            "per_client": per_client,
        }
