"""What several metrics of one layer share, computed once per layer and field."""

from __future__ import annotations

from simlab.core import geometry
from simlab.core.metrics.cosine import anisotropy, anisotropy_centred, pair_split


class Shared:
    """What several metrics of one layer share, computed once: the anisotropy of a field. `ids`:
    the token ids (B, T) of the layer's tokens where the input kind has them (simlab.core.
    inputs.InputKind.ids; read by the metrics that split by token type), else None."""

    def __init__(self, layer, causal: bool, ids=None):
        self.layer, self.causal, self.ids, self._cos = layer, causal, ids, {}

    def cos(self, field: str):
        """(global, within-sequence) mean pairwise cosine of layer.<field> (B, T, D)."""
        if field not in self._cos:
            self._cos[field] = anisotropy(getattr(self.layer, field))
        return self._cos[field]

    def cos_pairs(self, field: str):
        """(pooled within-sequence, between-sequence) cosine of layer.<field>
        (simlab.core.metrics.cosine.pair_split)."""
        key = ("pairs", field)
        if key not in self._cos:
            self._cos[key] = pair_split(getattr(self.layer, field))
        return self._cos[key]

    def cos_centred(self, field: str):
        """(global, within-sequence) mean pairwise cosine of the mean-centred layer.<field>."""
        key = ("centred", field)
        if key not in self._cos:
            self._cos[key] = anisotropy_centred(getattr(self.layer, field))
        return self._cos[key]

    def covariance(self, field: str):
        """The centred covariance (D, D) of all B*T tokens of layer.<field>, streamed by
        sequence (simlab.core.geometry.moments)."""
        key = ("cov", field)
        if key not in self._cos:
            self._cos[key] = geometry.covariance(geometry.moments(getattr(self.layer, field)))
        return self._cos[key]

    def spectrum(self, field: str):
        """The covariance's eigenvalues, descending (simlab.core.geometry.spectrum)."""
        key = ("spectrum", field)
        if key not in self._cos:
            self._cos[key] = geometry.spectrum(self.covariance(field))
        return self._cos[key]

    def tokens(self, field: str):
        """layer.<field> as the (B*T, D) cloud of its tokens."""
        x = getattr(self.layer, field)
        return x.reshape(-1, x.shape[-1])

    def by_type(self, field: str):
        """(within, between) token types of layer.<field>'s variance (geometry.variance_by_type
        on the ids renumbered; computed once per field)."""
        key = ("type", field)
        if key not in self._cos:
            self._cos[key] = geometry.variance_by_type(self.tokens(field), self.ids.reshape(-1))
        return self._cos[key]
