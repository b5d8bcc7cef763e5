# Notebook 27's H200 section (a code cell), for once drafts/h200_27a.sh has run on the H200 and
# land_onerun.sh has committed results/h200/fused_ladder_29.json: insert after section 4's cells (it uses
# the predictions cell's H200_PREDICTED and the setup cell's pair and where), then write its prose from
# what it prints. Run on a CPU against a mock ladder file (kernel 28's H200 ladder entries, kernel 29's
# made 0.95x: numbers not real).
ladder = results("fused_ladder_29", device="h200")     # the H200's ladder of kernels 28 and 29, with spread
h200 = {k: {T: ladder["speed"][str(T)][f"k{k} tf32"] for T in (1024, 2048, 16384)} for k in (28, 29)}
ROOF200 = ladder["mma_tf32_roof"]["median"] / 1e12     # the H200's TF32 tensor-core rate, measured in that run
TARGET_MS = 0.11                                       # issue #23: the whole backward at T=1024
print(f"the whole backward in single calls, one run on an {ladder['device']} (fused_ladder_29; median ms, IQR):")
for T in (1024, 2048, 16384):
    print(pair(T, h200[28][T], h200[29][T]))
a, b = h200[28][1024], h200[29][1024]
band200 = (a["median_ms"] / H200_PREDICTED[1], a["median_ms"] / H200_PREDICTED[0])
print(f"kernel 29's header, {H200_PREDICTED[0]}x to {H200_PREDICTED[1]}x faster than kernel 28's {a['median_ms']:.4f} ms: "
      f"{band200[0]:.4f} to {band200[1]:.4f} ms; kernel 29's median {b['median_ms']:.4f} ms, {where(b['median_ms'], band200)}")
one29 = onerun["results"]["1024"].get("fused29 tf32")
print("in the one-run table (fused_ladder_vs_torch.json), T=1024: "
      + (f"kernel 29 {one29['median_ms']:.4f} ms, kernel 28 {onerun['results']['1024']['fused28 tf32']['median_ms']:.4f}"
         if one29 else "kernel 29 not in it"))
f200 = counts.fused_flops(B, 1024, NH, HS)
print(f"the floor: {f200 / 1e9:.2f} GFLOP at the H200's {ROOF200:.1f} TFLOP/s take {f200 / (ROOF200 * 1e9):.4f} ms; "
      f"kernel 29 runs at {f200 / b['median_ms'] / 1e9:.1f} TFLOP/s, {f200 / b['median_ms'] / 1e9 / ROOF200:.1%} of that rate")
fig = plots.plot_against_roof({"kernel 28": a, "kernel 29": b},
                              {"counted FLOPs at the H200's measured TF32 rate": f200 / (ROOF200 * 1e9)},
                              predicted_ms=band200, targets_ms={"issue #23 at T=1024": TARGET_MS},
                              title=f"The whole backward at B={B} T=1024 NH={NH} in single calls, on the H200, "
                                    "against kernel 29's header\n(results/h200/fused_ladder_29.json)")
plt.show()
