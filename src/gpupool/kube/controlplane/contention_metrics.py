"""The control plane's contention families, from the agents' signals (read at scrape time).

Series exist only for what is contended now, so their number follows the contended GPUs and
the shares on them, never every GPU or every pod: a quiet cluster exports none. The slowdown is
labelled by the pod's namespace and name (what an operator looks for), and the class family has
one series per workload class with a contended share.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence

from prometheus_client.core import GaugeMetricFamily, Metric

from gpupool.core.contention import ContendedGpu, class_shares


def contention_families(gpus: Sequence[ContendedGpu]) -> Iterator[Metric]:
    """The score per contended GPU, the slowdown per share on one, the share per class."""
    score = GaugeMetricFamily(
        "gpupool_gpu_contention_score",
        "Contention its agent published for the GPU (0 none to 1; contended GPUs only).",
        labels=["node", "gpu"],
    )
    slowdown = GaugeMetricFamily(
        "gpupool_share_slowdown_ratio",
        "Estimated slowdown of a pod's share of a contended GPU (1: none).",
        labels=["namespace", "pod", "node", "gpu"],
    )
    for gpu in gpus:
        score.add_metric([gpu.node, str(gpu.gpu)], gpu.score)
        for share in gpu.shares:
            namespace, _, name = share.pod.rpartition("/")
            slowdown.add_metric([namespace, name, gpu.node, str(gpu.gpu)], share.slowdown)
    yield score
    yield slowdown
    by_class = GaugeMetricFamily(
        "gpupool_class_contention_share",
        "Of the shares on contended GPUs, the fraction of each workload class ('' for none).",
        labels=["workload_class"],
    )
    for workload_class, fraction in class_shares(gpus).items():
        by_class.add_metric([workload_class], fraction)
    yield by_class
