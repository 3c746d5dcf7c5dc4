"""Aggregation factories: one factory a module, each composable with an inner factory."""

from tff_radiomap.aggregators.quantization import SymmetricQuantizationFactory
from tff_radiomap.aggregators.top_k import TopKFactory
from tff_radiomap.aggregators.adaptive_noise import AdaptiveGroupNoiseFactory, AdaptiveSubspaceNoiseFactory
from tff_radiomap.aggregators.client_perturbation import PerturbationState
from tff_radiomap.aggregators.clip_only import ClipOnlyFactory
from tff_radiomap.aggregators.directed_noise import DirectedNoiseFactory
from tff_radiomap.aggregators.uniform_noise import UniformNoiseFactory, central_gaussian_factory
from tff_radiomap.aggregators import subspace_noise
from tff_radiomap.aggregators.subspace_noise import SubspaceNoiseFactory
