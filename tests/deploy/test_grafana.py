"""deploy/grafana: the dashboard's PromQL parsed (promql-parser; and by `promtool check rules` where
installed), its metric names, labels and label values against the metrics contract
(tests/support/metrics_contract.py), its datasource against the provisioning file, and its layout.
"""

from __future__ import annotations

import re
import subprocess

import yaml

from support.deploy_recipes import DATASOURCES, needs_promtool, promql_nodes
from support.metrics_contract import LABEL_VALUES, METRICS, SERIES

# Grafana's built-in variables, replaced by something PromQL accepts before parsing.
GRAFANA_VARIABLES = {"$__rate_interval": "1m", "$__interval": "15s", "$__range": "6h"}


def dashboard_queries(dashboard: dict) -> list[tuple[dict, dict]]:
    return [(panel, target) for panel in dashboard["panels"] for target in panel.get("targets", [])]


def promql_of(expr: str) -> str:
    for variable, value in GRAFANA_VARIABLES.items():
        expr = expr.replace(variable, value)
    assert "$" not in expr, f"unknown Grafana variable in {expr!r}"
    return expr


def result_labels(node) -> set[str]:
    """The labels a query's result series carry (what a legend's {{label}} can name)."""
    import promql_parser as p

    if isinstance(node, p.VectorSelector):
        return set(SERIES.get(node.name, set()))
    if isinstance(node, p.MatrixSelector):
        return result_labels(node.vector_selector)
    if isinstance(node, (p.ParenExpr, p.UnaryExpr, p.SubqueryExpr)):
        return result_labels(node.expr)
    if isinstance(node, p.AggregateExpr):
        if node.modifier is None:
            return set()
        if node.modifier.type == p.AggModifierType.By:
            return set(node.modifier.labels)
        return result_labels(node.expr) - set(node.modifier.labels)
    if isinstance(node, p.Call):
        if node.func.name == "histogram_quantile":
            return result_labels(node.args[1]) - {"le"}
        vectors = [a for a in node.args if not isinstance(a, (p.NumberLiteral, p.StringLiteral))]
        return result_labels(vectors[0]) if vectors else set()
    if isinstance(node, p.BinaryExpr):
        lhs, rhs = result_labels(node.lhs), result_labels(node.rhs)
        return lhs if not isinstance(node.lhs, p.NumberLiteral) else rhs
    return set()


def promql_problems(expr: str) -> list[str]:
    """What is wrong with one dashboard query: syntax, metric names, label names and values."""
    import promql_parser as p

    try:
        tree = p.parse(promql_of(expr))
    except ValueError as err:
        return [f"{expr!r} does not parse: {err}"]
    problems = []
    selectors = [n for n in promql_nodes(tree) if isinstance(n, p.VectorSelector)]
    if not selectors:
        problems.append(f"{expr!r} reads no metric")
    for node in selectors:
        if node.name not in SERIES:
            problems.append(f"{expr!r}: {node.name} is not a farm metric")
            continue
        metric = re.sub(r"_(bucket|sum|count)$", "", node.name) if node.name not in METRICS else node.name
        for matcher in node.matchers.matchers:
            if matcher.name not in SERIES[node.name]:
                problems.append(f"{expr!r}: {node.name} has no label {matcher.name}")
            allowed = LABEL_VALUES.get(metric, {}).get(matcher.name)
            if allowed:
                values = matcher.value.split("|") if matcher.op in (p.MatchOp.Re, p.MatchOp.NotRe) else [matcher.value]
                problems += [f"{expr!r}: {matcher.name}={v!r} is not a value of {metric}" for v in values
                             if v not in allowed]
    for node in promql_nodes(tree):
        if isinstance(node, p.AggregateExpr) and node.modifier is not None:
            available = set().union(*(SERIES.get(s.name, set()) for s in promql_nodes(node.expr)
                                       if isinstance(s, p.VectorSelector)))
            problems += [f"{expr!r}: grouped by {label}, which its metrics lack" for label in node.modifier.labels
                         if label not in available]
    return problems


def test_dashboard_queries_use_only_farm_metrics(dashboard):
    queries = dashboard_queries(dashboard)
    assert len(queries) >= 10
    problems = [problem for _, target in queries for problem in promql_problems(target["expr"])]
    assert problems == []
    # Every legend names labels its query's result has.
    import promql_parser as p

    for panel, target in queries:
        labels = result_labels(p.parse(promql_of(target["expr"])))
        for label in re.findall(r"\{\{\s*(\w+)\s*\}\}", target.get("legendFormat", "")):
            assert label in labels, f"{panel['title']}: legend {{{{{label}}}}} not in {sorted(labels)}"
    # Every metric of the contract is shown somewhere.
    shown = {re.sub(r"_(bucket|sum|count)$", "", n.name) for _, t in queries
             for n in promql_nodes(p.parse(promql_of(t["expr"]))) if isinstance(n, p.VectorSelector)}
    assert shown == set(METRICS), set(METRICS) - shown


def test_dashboard_shows_what_the_issue_asks_for(dashboard):
    import promql_parser as p

    def panels_where(predicate):
        return [panel["title"] for panel, target in dashboard_queries(dashboard)
                if any(predicate(n) for n in promql_nodes(p.parse(promql_of(target["expr"]))))]

    def grouped(metric, label):
        return lambda n: (isinstance(n, p.AggregateExpr) and n.modifier is not None
                          and n.modifier.type == p.AggModifierType.By and label in n.modifier.labels
                          and any(isinstance(s, p.VectorSelector) and s.name == metric for s in promql_nodes(n.expr)))

    def rate_by_instance(n):
        return grouped("farm_trials_total", "instance")(n) and any(
            isinstance(c, p.Call) and c.func.name == "rate" for c in promql_nodes(n.expr))

    def errors(n):
        return isinstance(n, p.VectorSelector) and n.name == "farm_trials_total" and any(
            m.name == "outcome" and m.op in (p.MatchOp.NotEqual, p.MatchOp.NotRe) and m.value == "ok"
            for m in n.matchers.matchers)

    assert panels_where(grouped("farm_jobs", "state")), "jobs by state"
    assert panels_where(rate_by_instance), "trials/s by agent"
    assert panels_where(errors), "errors (outcomes other than ok)"
    latency = [panel for panel, target in dashboard_queries(dashboard)
               if "farm_job_best_latency_seconds" in target["expr"]]
    assert latency and latency[0]["type"] == "timeseries" and latency[0]["fieldConfig"]["defaults"]["unit"] == "s"
    assert panels_where(grouped("farm_agents", "fingerprint")), "agents by fingerprint"


def test_dashboard_datasource_is_the_provisioned_one(dashboard):
    [datasource] = yaml.safe_load(DATASOURCES.read_text())["datasources"]
    assert datasource["type"] == "prometheus"
    variables = {v["name"]: v for v in dashboard["templating"]["list"]}
    references = [panel["datasource"] for panel in dashboard["panels"]]
    references += [target["datasource"] for _, target in dashboard_queries(dashboard)]
    assert references
    for reference in references:
        assert reference["type"] == datasource["type"]
        uid = reference["uid"]
        variable = re.fullmatch(r"\$\{(\w+)\}|\$(\w+)", uid)
        if variable:
            declared = variables[variable.group(1) or variable.group(2)]
            assert declared["type"] == "datasource" and declared["query"] == datasource["type"]
            assert declared["current"]["value"] == datasource["uid"], "the variable defaults to the provisioned one"
        else:
            assert uid == datasource["uid"]


def test_dashboard_layout(dashboard):
    assert dashboard["uid"] and dashboard["title"] and isinstance(dashboard["schemaVersion"], int)
    ids = [panel["id"] for panel in dashboard["panels"]]
    assert len(ids) == len(set(ids))
    cells = {}
    for panel in dashboard["panels"]:
        grid = panel["gridPos"]
        assert grid["x"] >= 0 and grid["w"] > 0 and grid["x"] + grid["w"] <= 24, panel["title"]
        assert panel["type"] in {"timeseries", "stat", "table", "gauge", "bargauge", "barchart"}
        for x in range(grid["x"], grid["x"] + grid["w"]):
            for y in range(grid["y"], grid["y"] + grid["h"]):
                assert (x, y) not in cells, f"{panel['title']} overlaps {cells[(x, y)]}"
                cells[(x, y)] = panel["title"]
        refs = [t["refId"] for t in panel.get("targets", [])]
        assert len(refs) == len(set(refs)), panel["title"]


@needs_promtool
def test_dashboard_queries_parse_in_prometheus(dashboard, tmp_path):
    """Prometheus' own parser, through `promtool check rules`: each query as a recording rule."""
    rules = {"groups": [{"name": "dashboard", "rules": [
        {"record": f"dashboard:query_{i}", "expr": promql_of(target["expr"])}
        for i, (_, target) in enumerate(dashboard_queries(dashboard))]}]}
    path = tmp_path / "dashboard-rules.yml"
    path.write_text(yaml.safe_dump(rules))
    result = subprocess.run(["promtool", "check", "rules", str(path)], capture_output=True, text=True, timeout=120)
    assert result.returncode == 0 and "SUCCESS" in result.stdout, result.stdout + result.stderr


def test_promql_check_rejects_broken_queries():
    """A misspelt metric, an unknown label, a value the contract does not have, bad syntax."""
    assert promql_problems("sum(rate(farm_trails_total[5m]))")
    assert promql_problems('sum by (agent) (rate(farm_trials_total[5m]))')
    assert promql_problems('farm_trials_total{outcome="error"}')
    assert promql_problems("sum(rate(farm_trials_total[5m])")
    assert promql_problems('farm_job_best_latency_seconds{exported_job="job-1"}')
    assert not promql_problems('farm_job_best_latency_seconds{job_id="job-1"}')
