"""The "isosurface" pipeline: each server contours its blocks with VTK and renders them
offscreen with one camera shared by all servers (from the iteration's global bounds) and a
fixed clipping range; the partial images are composited sort-last by per-pixel depth on
server rank 0 (through the collectives), one PNG per iteration.

config: {"isovalue": float, "image_size": [w, h], "output": DIR, "color": [r, g, b]}
blocks: 3-D arrays indexed [z, y, x] (VTK image-data order: x varies fastest), meta
{"origin": [x, y, z], "spacing": [dx, dy, dz]}. Neighbouring blocks share one plane of
points, so that their surfaces meet without a gap.
"""

from __future__ import annotations

import os

import numpy as np

from ..._extras import require
from .._pipeline import InsituError, Pipeline, pipeline

os.environ.setdefault("VTK_DEFAULT_OPENGL_WINDOW", "vtkEGLRenderWindow")  # no X here


def _check_config(config: dict) -> tuple[float, tuple[int, int], str, tuple]:
    iso = config.get("isovalue")
    size = config.get("image_size", [512, 512])
    out = config.get("output")
    color = config.get("color", [0.9, 0.6, 0.3])
    if not isinstance(iso, (int, float)) or isinstance(iso, bool):
        raise InsituError(f"isosurface: isovalue = {iso!r}: must be a number")
    if not (
        isinstance(size, list)
        and len(size) == 2
        and all(type(x) is int and 8 <= x <= 8192 for x in size)
    ):
        raise InsituError(f"isosurface: image_size = {size!r}: must be [w, h], 8..8192 each")
    if not isinstance(out, str) or not out:
        raise InsituError(f"isosurface: output = {out!r}: must be a directory path")
    if not (isinstance(color, list) and len(color) == 3):
        raise InsituError(f"isosurface: color = {color!r}: must be [r, g, b] in 0..1")
    return float(iso), (size[0], size[1]), out, tuple(float(c) for c in color)


def camera_for(bounds) -> dict:
    """One camera for a domain's bounds (xmin, xmax, ymin, ymax, zmin, zmax): the same on
    every server, with a clipping range fixed from the bounds (depths stay comparable)."""
    lo = np.array(bounds[0::2], dtype=float)
    hi = np.array(bounds[1::2], dtype=float)
    center = (lo + hi) / 2
    diag = float(np.linalg.norm(hi - lo)) or 1.0
    direction = np.array([1.0, -1.4, 0.9])
    direction /= np.linalg.norm(direction)
    dist = 1.7 * diag
    return {
        "focal": center.tolist(),
        "position": (center + dist * direction).tolist(),
        "up": [0.0, 0.0, 1.0],
        "clip": [dist - diag, dist + diag],
        "angle": 30.0,
    }


def block_bounds(array: np.ndarray, meta: dict) -> list[float]:
    origin = meta.get("origin", [0.0, 0.0, 0.0])
    spacing = meta.get("spacing", [1.0, 1.0, 1.0])
    nz, ny, nx = array.shape
    out = []
    for o, s, n in zip(origin, spacing, (nx, ny, nz)):
        out += [float(o), float(o + s * (n - 1))]
    return out


def render(
    blocks: list[tuple[np.ndarray, dict]],
    isovalue: float,
    size: tuple[int, int],
    camera: dict,
    color=(0.9, 0.6, 0.3),
) -> tuple[np.ndarray, np.ndarray]:
    """Contour and render blocks offscreen: (rgb uint8 [h, w, 3], depth float32 [h, w] in
    [0, 1], 1 = background), rows bottom-up as OpenGL gives them."""
    vtk = require("vtk", "the isosurface pipeline")
    from vtk.util.numpy_support import numpy_to_vtk, vtk_to_numpy

    ren = vtk.vtkRenderer()
    ren.SetBackground(0.0, 0.0, 0.0)
    keep = []
    for array, meta in blocks:
        if array.ndim != 3 or min(array.shape) < 2:
            raise InsituError(
                f"isosurface: blocks must be 3-D with >= 2 points per axis "
                f"(got shape {array.shape})"
            )
        img = vtk.vtkImageData()
        nz, ny, nx = array.shape
        img.SetDimensions(nx, ny, nz)
        img.SetOrigin(*meta.get("origin", [0.0, 0.0, 0.0]))
        img.SetSpacing(*meta.get("spacing", [1.0, 1.0, 1.0]))
        data = numpy_to_vtk(np.ascontiguousarray(array, dtype=np.float64).ravel(), deep=True)
        data.SetName("f")
        img.GetPointData().SetScalars(data)
        contour = vtk.vtkFlyingEdges3D()
        contour.SetInputData(img)
        contour.SetValue(0, isovalue)
        contour.ComputeNormalsOff()  # face normals: the same triangles shade the same
        contour.ComputeGradientsOff()
        mapper = vtk.vtkPolyDataMapper()
        mapper.SetInputConnection(contour.GetOutputPort())
        mapper.ScalarVisibilityOff()
        actor = vtk.vtkActor()
        actor.SetMapper(mapper)
        actor.GetProperty().SetColor(*color)
        actor.GetProperty().SetInterpolationToFlat()
        ren.AddActor(actor)
        keep += [img, contour, mapper, actor]
    cam = ren.GetActiveCamera()
    cam.SetFocalPoint(*camera["focal"])
    cam.SetPosition(*camera["position"])
    cam.SetViewUp(*camera["up"])
    cam.SetViewAngle(camera["angle"])
    cam.SetClippingRange(*camera["clip"])
    win = vtk.vtkRenderWindow()
    win.SetOffScreenRendering(1)
    win.SetSize(*size)
    win.AddRenderer(ren)
    win.Render()
    w, h = size
    rgb_arr = vtk.vtkUnsignedCharArray()
    win.GetPixelData(0, 0, w - 1, h - 1, 1, rgb_arr, 0)
    rgb = vtk_to_numpy(rgb_arr).reshape(h, w, 3).copy()
    z_arr = vtk.vtkFloatArray()
    win.GetZbufferData(0, 0, w - 1, h - 1, z_arr)
    depth = vtk_to_numpy(z_arr).reshape(h, w).astype(np.float32).copy()
    win.Finalize()
    return rgb, depth


def composite(parts: list[tuple[np.ndarray, np.ndarray]]) -> tuple[np.ndarray, np.ndarray]:
    """Sort-last: per pixel, the color of the nearest depth."""
    rgb, depth = parts[0][0].copy(), parts[0][1].copy()
    for c, d in parts[1:]:
        nearer = d < depth
        depth = np.where(nearer, d, depth)
        rgb = np.where(nearer[..., None], c, rgb)
    return rgb, depth


def write_png(path: str, rgb: np.ndarray) -> None:
    import matplotlib

    matplotlib.use("Agg")
    from matplotlib import image

    image.imsave(path, rgb[::-1])  # OpenGL rows are bottom-up


@pipeline("isosurface")
class Isosurface(Pipeline):
    def __init__(self, config: dict):
        super().__init__(config)
        self.isovalue, self.size, self.output, self.color = _check_config(config)
        os.makedirs(self.output, exist_ok=True)
        self.blocks: list = []

    def activate(self, iteration: int) -> None:
        self.blocks = []

    def warm(self) -> None:
        """Import VTK, make a GL context and render once (the first render costs ~1 s)."""
        z, y, x = np.mgrid[0:8, 0:8, 0:8] - 3.5
        ball = np.sqrt(x * x + y * y + z * z)
        meta = {"origin": [0.0, 0.0, 0.0], "spacing": [1.0, 1.0, 1.0]}
        render([(ball, meta)], 2.0, self.size, camera_for(block_bounds(ball, meta)))

    def stage(self, block_id, array, meta) -> None:
        self.blocks.append((np.asarray(array), dict(meta)))

    def execute(self, iteration: int):
        comm = self.comm
        mine = [block_bounds(a, m) for a, m in self.blocks]
        every = [b for part in comm.allgather(mine) for b in part]
        if not every:
            raise InsituError(f"isosurface: nothing was staged in iteration {iteration}")
        bounds = [
            min(b[i] for b in every) if i % 2 == 0 else max(b[i] for b in every) for i in range(6)
        ]
        camera = camera_for(bounds)
        part = (
            render(self.blocks, self.isovalue, self.size, camera, self.color)
            if self.blocks
            else None
        )
        parts = comm.gather(part, root=0)
        if comm.rank != 0:
            return None
        rgb, _ = composite([p for p in parts if p is not None])
        path = os.path.join(self.output, f"isosurface.{iteration:05d}.png")
        write_png(path, rgb)
        return path

    def deactivate(self, iteration: int) -> None:
        self.blocks = []
