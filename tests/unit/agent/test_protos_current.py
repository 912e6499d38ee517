"""The committed gRPC stubs are what scripts/gen_protos.py makes from proto/ today."""

from __future__ import annotations

from collections.abc import Callable


def test_generated_stubs_are_current(generated_current: Callable[[str], None]) -> None:
    generated_current("gen_protos.py")


def test_stubs_speak_the_kubelets_method_paths() -> None:
    from gpupool.agent.protos.deviceplugin.v1beta1 import api_pb2 as dp
    from gpupool.agent.protos.podresources.v1 import api_pb2 as pr

    assert dp.DESCRIPTOR.services_by_name["DevicePlugin"].full_name == "v1beta1.DevicePlugin"
    assert dp.DESCRIPTOR.services_by_name["Registration"].full_name == "v1beta1.Registration"
    assert pr.DESCRIPTOR.services_by_name["PodResourcesLister"].full_name == "v1.PodResourcesLister"
    from gpupool.agent.protos.dra.v1 import api_pb2 as dra
    from gpupool.agent.protos.pluginregistration.v1 import api_pb2 as reg

    assert (
        dra.DESCRIPTOR.services_by_name["DRAPlugin"].full_name
        == "k8s.io.kubelet.pkg.apis.dra.v1.DRAPlugin"
    )
    assert reg.DESCRIPTOR.services_by_name["Registration"].full_name == (
        "pluginregistration.Registration"
    )
    assert "share_id" in dra.Device.DESCRIPTOR.fields_by_name
    # the field the kubelet fills, by its proto name (a known pitfall: not devicesIDs)
    assert "devices_ids" in dp.ContainerAllocateRequest.DESCRIPTOR.fields_by_name
