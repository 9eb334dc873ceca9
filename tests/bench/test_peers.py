"""The peers comparison's table: medians over rounds, CPU per request, and the targets' ratios."""

import pytest

from bench import peers

pytestmark = pytest.mark.embedded


def _point(server: str, model: str, proto: str, conc: int, **values: float) -> dict[str, object]:
    return {"server": server, "model": model, "proto": proto, "concurrency": conc, "ok": True,
            **values}  # fmt: skip


def _rounds() -> list[dict[str, object]]:
    points = []
    for throughput, cores in ((1000.0, 0.5), (3000.0, 0.9), (2000.0, 0.6)):  # three rounds
        points += [
            _point(peers.PORTICO, "mlp", "http-bin", 32, infer_per_s=2 * throughput,
                   server_cpu_cores=cores, server_avg_exec_batch=16.0),
            _point(peers.PORTICO, "mlp", "grpc", 32, infer_per_s=throughput,
                   server_cpu_cores=cores, server_avg_exec_batch=2.0),
            _point(peers.PYTRITON, "mlp", "grpc", 32, infer_per_s=throughput / 2,
                   server_cpu_cores=cores),
            _point(peers.PORTICO, "identity", "grpc", 1, p50_us=throughput / 10),
        ]  # fmt: skip
    points[3]["unstable_at_15pct"] = True  # one round's identity point, at any spread only
    points.append(_point(peers.MLSERVER, "mlp", "grpc", 32, infer_per_s=9.0))
    points[-1]["ok"] = False  # a failed measurement is left out, not averaged in
    return points


def test_figures_are_medians_over_rounds_marked_when_unstable_with_cpu_per_request() -> None:
    main, _ = peers.table(_rounds())
    portico = next(line for line in main.splitlines() if line.startswith("| Portico"))
    cells = [cell.strip() for cell in portico.strip("|").split("|")]
    assert cells[1:5] == ["4,000/s", "2,000/s", "—", "200 µs †"]
    # Per round 0.5/2000, 0.9/6000, 0.6/4000 cores per request/s over HTTP: median 150 µs.
    assert cells[5] == "150 µs / 300 µs"
    assert cells[6] == "16 / 2"
    mlserver = next(line for line in main.splitlines() if line.startswith("| MLServer"))
    assert "9/s" not in mlserver


def test_ratios_compare_the_medians_against_the_issue_targets() -> None:
    _, ratios = peers.table(_rounds())
    lines = ratios.splitlines()[2:]
    rows = {cells[0]: cells[1:] for cells in ([c.strip() for c in line.strip("|").split("|")]
                                              for line in lines)}  # fmt: skip
    assert rows["Portico gRPC ÷ Portico HTTP"] == ["0.50", "≥ 0.9"]
    assert rows["Portico gRPC ÷ PyTriton gRPC"] == ["2.00", "≥ 1.5"]
    assert rows["Portico HTTP ÷ PyTriton HTTP"] == ["—", "≥ 2"]


def test_a_grpc_variant_gets_its_own_row_and_ratios() -> None:
    variant = peers.transport_variant("h2corn")
    assert variant.env == {"SERVING_GRPC_TRANSPORT": "h2corn"}
    points = _rounds() + [
        _point(variant.server, "mlp", "grpc", 32, infer_per_s=3600.0, server_cpu_cores=0.9)
    ]
    main, ratios = peers.table(points, (variant,))
    labels = [line.split("|")[1].strip() for line in main.splitlines()[2:]]
    assert labels[:2] == ["Portico", "Portico, gRPC on h2corn"]  # right under Portico's own
    rows = {cells[0]: cells[1:] for cells in ([c.strip() for c in line.strip("|").split("|")]
                                              for line in ratios.splitlines()[2:])}  # fmt: skip
    assert rows["Portico, gRPC on h2corn ÷ Portico HTTP"] == ["0.90", "≥ 0.9"]
    assert rows["Portico, gRPC on h2corn ÷ PyTriton gRPC"] == ["3.60", "≥ 1.5"]


def test_the_grpc_http_ratio_also_gives_each_rounds_own() -> None:
    points = [{**point, "round": index // 4} for index, point in enumerate(_rounds()[:12])]
    points[4]["infer_per_s"] = 9000.0  # round 2's HTTP: its own ratio is 3000 / 9000
    _, ratios = peers.table(points)
    row = next(line for line in ratios.splitlines() if "Portico gRPC ÷ Portico HTTP" in line)
    # Medians: gRPC 2,000/s, HTTP 4,000/s over the rounds; per round 0.50, 0.33, 0.50.
    assert "0.50 (rounds: 0.50, 0.33, 0.50; median 0.50)" in row


def test_each_protocol_gets_a_fresh_server_in_alternating_order(monkeypatch, tmp_path) -> None:
    calls = []

    def harness(work, servers, protocols, model, concurrency, window_ms, reverse, env=None):
        calls.append((servers, protocols, model))
        return [{"server": servers.split(",")[0], "proto": protocols, "model": model}]

    monkeypatch.setattr(peers, "_run", harness)
    forward = peers.run_round(tmp_path, reverse=False, window_ms=1000, index=0)
    first = calls[:]
    calls.clear()
    backward = peers.run_round(tmp_path, reverse=True, window_ms=1000, index=1)
    assert all("," not in protocols for _, protocols, _ in first + calls)  # one per server start
    portico_first = [p for s, p, m in first if s.startswith(peers.PORTICO) and m == "mlp"]
    portico_back = [p for s, p, m in calls if s.startswith(peers.PORTICO) and m == "mlp"]
    assert portico_first == ["grpc", "http-bin"] and portico_back == ["http-bin", "grpc"]
    assert {p["round"] for p in forward} == {0} and {p["round"] for p in backward} == {1}


def test_served_over_raw_divides_portico_http_by_the_calibration_timed_around_it() -> None:
    points = _rounds()
    for point, raw in zip(points[0:12:4], (4000.0, 3000.0, 8000.0), strict=True):  # HTTP points
        point["raw_ort_b1_per_s"] = raw
    _, ratios = peers.table(points)
    row = next(line for line in ratios.splitlines() if "raw ONNX Runtime" in line)
    # Per round 2,000 / 4,000, 6,000 / 3,000 and 4,000 / 8,000.
    assert "| 0.50 (rounds: 0.50, 2.00, 0.50) | ≥ 0.6 |" in row
    _, without = peers.table(_rounds())
    assert "| — | ≥ 0.6 |" in next(line for line in without.splitlines() if "raw ONNX" in line)


def test_a_harness_call_tags_its_points_with_the_calibrations_it_ran(monkeypatch, tmp_path) -> None:
    """The shared harness appends to its calibration log (earlier calls' lines stay); only the
    lines this call added count for its points."""
    harness = tmp_path / "peers"
    harness.mkdir()
    script = harness / "run.sh"
    script.write_text(
        "#!/bin/sh\n"
        'echo \'{"mlp_b1_intra1_calls_per_s": 5000}\' >> "$PEERS_HOME/results/calib.jsonl"\n'
        'echo \'{"mlp_b1_intra1_calls_per_s": 7000}\' >> "$PEERS_HOME/results/calib.jsonl"\n'
        'echo \'[{"server": "s", "ok": true}]\' > "$PEERS_HOME/results/servers.json"\n'
    )
    script.chmod(0o755)
    work = tmp_path / "work"
    (work / "results").mkdir(parents=True)
    (work / "results" / "calib.jsonl").write_text('{"mlp_b1_intra1_calls_per_s": 100}\n')
    monkeypatch.setenv("PEERS_DIR", str(harness))
    points = peers._run(work, "s", "http-bin", "mlp", "32", 1000, False)
    assert points == [{"server": "s", "ok": True, "raw_ort_b1_per_s": 6000}]
