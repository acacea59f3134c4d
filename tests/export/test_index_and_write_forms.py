"""The exported forms of indexing and of writes into views (export/index_checks.py, write_forms.py, tidy.py).

RetinaNet's ONNX file carried, per image: an identity-permutation Transpose around each ``x[i]`` GatherND and
``x[i, j]`` (torch_lib moves the indexed axes first, and back), and a ScatterElements over every element of each
image written into the zero-padded batch (``batched[i, :c, :h, :w].copy_(img)``). Each test: the node is gone from
the file, and onnxruntime's answer on inputs of another size (and other index values) is eager's.
"""
import warnings

import pytest
import torch

import tracejit

onnx = pytest.importorskip("onnx")
ort = pytest.importorskip("onnxruntime")


def _export(fn, *args):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return tracejit.export_onnx(tracejit.trace(fn, args))


def _run(proto, *args):
    sess = ort.InferenceSession(proto.SerializeToString(), providers=["CPUExecutionProvider"])
    feed = {i.name: a.numpy() for i, a in zip(sess.get_inputs(), args)}
    return [torch.from_numpy(o) for o in sess.run(None, feed)]


def _ops(proto) -> list[str]:
    return [n.op_type for n in proto.graph.node]


def _identity_transposes(proto) -> int:
    count = 0
    for n in proto.graph.node:
        if n.op_type == "Transpose":
            perm = [list(a.ints) for a in n.attribute if a.name == "perm"]
            count += bool(perm) and perm[0] == list(range(len(perm[0])))
    return count


def _rows(x, idx):
    return x[idx] * 2


def _columns(x, idx):
    return x[:, idx] + 1


def test_one_index_tensor_is_a_gather_on_its_axis():
    x, idx = torch.randn(5, 4, 3), torch.tensor([[4, 0], [-1, 2]])
    for fn in (_rows, _columns):
        proto = _export(fn, x, idx if fn is _rows else idx % 4)
        assert "GatherND" not in _ops(proto) and "Transpose" not in _ops(proto), (fn.__name__, _ops(proto))
        assert "Gather" in _ops(proto)
        new_x, new_idx = torch.randn(7, 6, 2), torch.tensor([[6, -7, 0], [3, -1, 1]])
        if fn is _columns:
            new_idx = new_idx % 6
        (got,) = _run(proto, new_x, new_idx)
        assert got.shape == fn(new_x, new_idx).shape
        torch.testing.assert_close(got, fn(new_x, new_idx))


def test_an_index_past_the_end_fails_the_run_as_eager_raises():
    proto = _export(_rows, torch.randn(5, 3), torch.tensor([1, 2]))
    with pytest.raises(IndexError):
        _rows(torch.randn(5, 3), torch.tensor([5]))
    with pytest.raises(Exception, match="out of bounds|invalid|indices"):
        _run(proto, torch.randn(5, 3), torch.tensor([5]))


def _two_indices(x, i, j):
    return x[i, j]


def test_identity_transposes_around_two_index_tensors_are_dropped():
    x, i, j = torch.randn(4, 5, 3), torch.tensor([0, 3, 1]), torch.tensor([4, 0, 2])
    proto = _export(_two_indices, x, i, j)
    assert "GatherND" in _ops(proto)   # torch_lib's form, whose Transposes were the identity
    assert _identity_transposes(proto) == 0, _ops(proto)
    assert proto.graph.output[0].name in {o for n in proto.graph.node for o in n.output}
    new = (torch.randn(6, 7, 2), torch.tensor([5, -6, 2, 0]), torch.tensor([6, 0, -1, 3]))
    (got,) = _run(proto, *new)
    torch.testing.assert_close(got, _two_indices(*new))


def _batch_images(images):
    """torchvision's GeneralizedRCNNTransform.batch_images: each image copied into a zero-padded batch."""
    batched = images.new_zeros(images.shape[0], images.shape[1], images.shape[2] + 3, images.shape[3] + 5)
    for i in range(images.shape[0]):
        img = images[i]
        batched[i, : img.shape[0], : img.shape[1], : img.shape[2]].copy_(img)
    return batched * 3


def test_rows_written_into_a_batch_are_block_copies():
    proto = _export(_batch_images, torch.randn(2, 3, 8, 6))
    ops = _ops(proto)
    assert "ScatterElements" not in ops and "Transpose" not in ops, ops
    new = torch.randn(2, 3, 11, 4)
    (got,) = _run(proto, new)
    torch.testing.assert_close(got, _batch_images(new))


def _write_last_row_and_middle_columns(x, row, block):
    y = x * 1.5
    y[-1] = row
    y[:, 2:4] = block
    y[1:, -2:] += 1.0   # a negative start: torch_lib's form
    return y


def test_a_negative_row_and_a_column_block_write_as_eager():
    args = torch.randn(4, 6), torch.randn(6), torch.randn(4, 2)
    proto = _export(_write_last_row_and_middle_columns, *args)
    ops = _ops(proto)
    assert "ScatterElements" not in ops, ops
    new = torch.randn(5, 9), torch.randn(9), torch.randn(5, 2)
    (got,) = _run(proto, *new)
    torch.testing.assert_close(got, _write_last_row_and_middle_columns(*new))


def _scatter_calls(x, row, block):
    return torch.select_scatter(x, row, 0, 1) + torch.slice_scatter(x, block, 1, 1, 3)


def test_select_and_slice_scatter_called_by_the_program():
    args = torch.randn(3, 5), torch.randn(5), torch.randn(3, 2)
    proto = _export(_scatter_calls, *args)
    assert "ScatterElements" not in _ops(proto) and "Transpose" not in _ops(proto), _ops(proto)
    new = torch.randn(4, 7), torch.randn(7), torch.randn(4, 2)
    (got,) = _run(proto, *new)
    torch.testing.assert_close(got, _scatter_calls(*new))


def _identity_permute(x):
    return x.permute(0, 1)


def test_an_identity_transpose_of_an_input_returned_stays_valid():
    proto = _export(_identity_permute, torch.randn(2, 3))
    onnx.checker.check_model(proto, full_check=True)
    new = torch.randn(4, 5)
    (got,) = _run(proto, new)
    torch.testing.assert_close(got, new)
