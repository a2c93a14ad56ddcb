"""Where the data is and what a node costs.

``locality``: the fraction of the job's datasets (``JobSpec.datasets``) the node holds
(``NodeDatasetsChanged``); 0 on every node for a job that names none, so it adds exactly nothing
to such a job's scores and moves no placement (nor a float's last bit) of the clusters without data. A gang
is scored node by node, each of its nodes by what that node holds. Weight 10: as much as packing a
node full, so a node holding all of a job's data wins over a fuller one without it, and a node holding
half of it ties with one node's worth of packing.

``cost``: ``1 / (1 + price)``, the node's price per node-hour from its label ``horizon.io/price`` (or
``price``), a number of 0 or more in any currency unit. Price 0 scores 1, price 1 scores 0.5, price 3
scores 0.25: cheaper is higher, and the step between two prices shrinks as they grow. A node without a
price (or with a value that is not such a number: the label is the operator's, refusing it is not
placement's business) scores 0, as the dearest: a price unknown is never a bargain, and a cluster
that priced no node adds exactly nothing. Weight 0 by default (a profile turns it on:
``--weight cost=10``), so clusters place as before until an operator asks.
"""

from __future__ import annotations

import math
from functools import lru_cache
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from services.domain.fit.cycle import Cycle

PRICE_LABELS = ("horizon.io/price", "price")  # the first one the node has is its price


class Locality:
    name = "locality"
    default_weight = 10.0

    def score(self, cyc: Cycle) -> float:
        wanted = cyc.req.datasets
        if not wanted:
            return 0.0
        held = cyc.node.datasets
        return sum(1 for d in wanted if d in held) / len(wanted)


@lru_cache(maxsize=4096)
def price_score(text: str) -> float:
    try:
        price = float(text)
    except ValueError:
        return 0.0
    if not math.isfinite(price) or price < 0:
        return 0.0
    return 1.0 / (1.0 + price)


def node_price(labels: dict[str, str]) -> str | None:
    """The node's price label's value, or None."""
    for key in PRICE_LABELS:
        if key in labels:
            return labels[key]
    return None


class Cost:
    name = "cost"
    default_weight = 0.0

    def score(self, cyc: Cycle) -> float:
        text = node_price(cyc.node.labels)
        return 0.0 if text is None else price_score(text)
