"""The fusion report: what a pipeline run fused, why the rest was not, and a picture of it."""

from . import picture
from .fusion_report import FusionReport, Rejection, last_report, publish
from .snapshot import Picture, Unfused, op_key

__all__ = ["FusionReport", "Rejection", "Unfused", "Picture", "op_key", "publish",
           "last_report", "picture"]
