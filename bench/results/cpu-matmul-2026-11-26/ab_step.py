"""One process: roberta/bert small (bench --small), ember vs eager interleaved, many steps; prints p10/median."""
import sys, time, statistics as st, torch, ember
from ember.tools import zoo
name, train = sys.argv[1], sys.argv[2] == "train"
e = zoo.get(name); ctx = zoo.Ctx("cpu", small=True)
torch.manual_seed(0); m = e.make_model(ctx); zoo.disable_dropout(m)
torch.manual_seed(0); m2 = e.make_model(ctx); zoo.disable_dropout(m2); m2.load_state_dict(m.state_dict())
ex = e.inputs(ctx, 2, torch.Generator().manual_seed(1))
cm = ember.compile(m2)
opt = torch.optim.SGD(m.parameters(), lr=1e-4); opt2 = torch.optim.SGD(m2.parameters(), lr=1e-4)
def step(model, o):
    if train:
        o.zero_grad(); loss = e.loss(model(*ex.args, **ex.kwargs), ex.target); loss.backward(); o.step()
    else:
        with torch.no_grad(): model(*ex.args, **ex.kwargs)
for _ in range(3): step(m, opt); step(cm, opt2)
te, tc = [], []
for _ in range(int(sys.argv[3]) if len(sys.argv) > 3 else 60):
    t = time.perf_counter(); step(m, opt); te.append(time.perf_counter() - t)
    t = time.perf_counter(); step(cm, opt2); tc.append(time.perf_counter() - t)
q = lambda v, p: sorted(v)[int(p * (len(v) - 1))] * 1e3
fb = sum(ember.stats()["fallbacks"].values())
print(f"{name} {'train' if train else 'infer'}: eager p10 {q(te,.1):.2f} med {st.median(te)*1e3:.2f} | ember p10 {q(tc,.1):.2f} med {st.median(tc)*1e3:.2f} | speedup p10 {q(te,.1)/q(tc,.1):.3f} med {st.median(te)/st.median(tc):.3f} | fallback ops {fb}")
