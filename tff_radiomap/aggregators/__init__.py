"""Aggregation factories: one factory a module, each composable with an inner factory."""

from tff_radiomap.aggregators.quantization import SymmetricQuantizationFactory
from tff_radiomap.aggregators.top_k import TopKFactory
