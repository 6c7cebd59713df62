"""The dashboard's page: one HTML document, its CSS and JavaScript inline (no CDN: a login
node may be offline, and the server's Content-Security-Policy forbids any other origin).

The script polls the JSON endpoints once a second with the page's own query string (the
token) and draws: the task counts by state, tasks by state over time (canvas), a heatmap of
core and GPU use per node (canvas, one cell per node: 2,048 nodes stay one readable grid),
the queue by shape with its wait and why, pilots and partitions, service groups, function
pools, failed tasks with their reasons. After each draw it sets data-refreshes and
data-states on <body> (what the browser test reads).
"""

PAGE = r"""<!doctype html>
<html lang="en"><head><meta charset="utf-8">
<meta name="viewport" content="width=device-width, initial-scale=1">
<meta name="referrer" content="no-referrer">
<title>pilotfish dashboard</title>
<style>
body{font:13px/1.4 system-ui,sans-serif;margin:0;background:#f6f7f9;color:#1d2330}
header{background:#1d2330;color:#fff;padding:8px 16px;display:flex;gap:18px;align-items:baseline;flex-wrap:wrap}
header h1{font-size:16px;margin:0}
.badge{padding:1px 8px;border-radius:9px;font-size:12px;background:#777}
.badge.live{background:#1a7f37}.badge.done{background:#555}.badge.err{background:#b42318}
main{padding:10px 16px;display:grid;grid-template-columns:repeat(auto-fit,minmax(560px,1fr));gap:12px}
section{background:#fff;border:1px solid #dde1e7;border-radius:6px;padding:8px 12px;min-width:0}
section.wide{grid-column:1/-1}
h2{font-size:14px;margin:2px 0 8px}
.states{display:flex;gap:8px;flex-wrap:wrap}
.st{border-radius:5px;padding:4px 10px;min-width:88px;color:#fff}
.st b{display:block;font-size:18px}
table{border-collapse:collapse;width:100%}
th,td{text-align:left;padding:2px 6px;border-bottom:1px solid #eef0f3;vertical-align:top}
th{font-weight:600;color:#555}
td.num,th.num{text-align:right;font-variant-numeric:tabular-nums}
.muted{color:#777}.small{font-size:11px}
canvas{display:block;max-width:100%}
#tip{position:fixed;pointer-events:none;background:#1d2330;color:#fff;padding:3px 6px;border-radius:4px;font-size:12px;display:none;z-index:9}
.legend span{display:inline-block;margin-right:10px}
.legend i{display:inline-block;width:10px;height:10px;margin-right:3px;vertical-align:middle}
.ramp{display:inline-block;width:120px;height:10px;vertical-align:middle;background:linear-gradient(90deg,#f0f0f0,#ffe08a,#f59e0b,#d9480f,#7f1d1d)}
</style></head>
<body data-refreshes="0">
<header><h1>pilotfish</h1><span id="session" class="muted"></span><span id="badge" class="badge">…</span>
<span id="elapsed"></span><span id="meta" class="muted small"></span></header>
<main>
<section class="wide"><h2>Tasks by state</h2><div id="states" class="states"></div></section>
<section class="wide"><h2>Tasks by state over time</h2><canvas id="timeline" width="1200" height="220"></canvas><div id="tl-legend" class="legend small"></div></section>
<section class="wide"><h2>Use per node <span id="nodes-mode" class="muted small"></span></h2><div id="nodes"></div>
<div class="small muted">each cell one node; colour: share of its cores (left) and GPUs (right) in use <span class="ramp"></span> 0 → 100% · grey outline: no GPUs · black: lost</div></section>
<section><h2>Queue by shape</h2><div id="queue"></div></section>
<section><h2>Failed tasks</h2><div id="failed"></div></section>
<section><h2>Pilots and partitions</h2><div id="pilots"></div></section>
<section><h2>Service groups</h2><div id="services"></div></section>
<section><h2>Function pools</h2><div id="pools"></div></section>
</main><div id="tip"></div>
<script>
"use strict";
const Q = location.search;
const COLORS = {NEW:"#9aa5b1",SCHEDULING:"#7b8794",STAGING_INPUT:"#5f6b7a",AGENT_SCHEDULING:"#e0a800",
  EXECUTING:"#1769aa",STAGING_OUTPUT:"#6f42c1",DONE:"#1a7f37",FAILED:"#b42318",CANCELED:"#8a6d3b"};
const ORDER = Object.keys(COLORS);
const $ = id => document.getElementById(id);
function el(tag, attrs, ...kids){const e=document.createElement(tag);
  for(const [k,v] of Object.entries(attrs||{})){ if(k==="class") e.className=v; else e.setAttribute(k,v);}
  for(const k of kids){ if(k===null||k===undefined) continue; e.append(k instanceof Node?k:String(k));} return e;}
function fmt(n){return n===null||n===undefined?"–":Number(n).toLocaleString("en-US");}
function dur(s){if(s===null||s===undefined||!isFinite(s)) return "–"; if(s<1) return (s*1000).toFixed(0)+" ms";
  if(s<120) return s.toFixed(1)+" s"; if(s<7200) return (s/60).toFixed(1)+" min"; return (s/3600).toFixed(1)+" h";}
function table(head, rows, numeric){const t=el("table");const tr=el("tr");
  head.forEach((h,i)=>tr.append(el("th",{class:numeric&&numeric.includes(i)?"num":""},h)));t.append(tr);
  for(const r of rows){const row=el("tr");r.forEach((c,i)=>row.append(el("td",{class:numeric&&numeric.includes(i)?"num":""},c)));t.append(row);} return t;}
function put(id, node){const d=$(id); d.replaceChildren(node);}
function none(text){return el("div",{class:"muted"},text);}

function drawStates(s){
  const box=el("div",{class:"states"});
  for(const k of ORDER){box.append(el("div",{class:"st",style:"background:"+COLORS[k],id:"n-"+k},
    el("b",{},fmt(s.states[k]||0)),k));}
  put("states", box);
  $("session").textContent=s.session; const b=$("badge");
  b.textContent=s.live?"live":"finished"; b.className="badge "+(s.live?"live":"done");
  $("elapsed").textContent=fmt(s.tasks)+" tasks · "+dur(s.elapsed_s);
  $("meta").textContent=(s.catching_up?"reading the session: "+Math.floor(100*s.bytes_read/Math.max(1,s.bytes_total))+"% · ":"")+
    "refresh "+s.refresh_ms+" ms · "+fmt(s.events_read)+" events read"+
    (s.warnings.length?" · "+s.warnings.join("; "):"");
}

function drawTimeline(tl){
  const c=$("timeline"); const w=c.clientWidth||1200; c.width=w; const h=c.height; const g=c.getContext("2d");
  g.clearRect(0,0,w,h); const L=40,R=8,T=8,B=20; const n=tl.t.length;
  const leg=el("div"); if(!n){$("tl-legend").replaceChildren(none("no task events yet"));return;}
  let ymax=1; for(const k of ORDER){const v=tl.series[k]||[]; for(const x of v) if(x>ymax) ymax=x;}
  const tmax=tl.t[n-1]||1; const X=t=>L+(w-L-R)*t/tmax; const Y=v=>T+(h-T-B)*(1-v/ymax);
  g.strokeStyle="#dde1e7"; g.fillStyle="#555"; g.font="11px sans-serif"; g.lineWidth=1;
  for(let i=0;i<=4;i++){const v=ymax*i/4; const y=Y(v); g.beginPath(); g.moveTo(L,y); g.lineTo(w-R,y); g.stroke();
    g.fillText(v>=1000?(v/1000).toFixed(v>=1e4?0:1)+"k":v.toFixed(0),2,y+4);}
  for(let i=0;i<=5;i++){const t=tmax*i/5; const s=dur(t); g.fillText(s,Math.min(X(t)-10,w-R-g.measureText(s).width),h-5);}
  for(const k of ORDER){const v=tl.series[k]; if(!v||!v.some(x=>x>0)) continue;
    g.strokeStyle=COLORS[k]; g.lineWidth=1.6; g.beginPath();
    for(let i=0;i<n;i++){const x=X(tl.t[i]),y=Y(v[i]); if(i) g.lineTo(x,y); else g.moveTo(x,y);} g.stroke();
    leg.append(el("span",{},el("i",{style:"background:"+COLORS[k]}),k));}
  $("tl-legend").replaceChildren(leg);
}

function heat(f){ // 0..1 -> light grey, yellow, orange, red, dark red
  const stops=[[240,240,240],[255,224,138],[245,158,11],[217,72,15],[127,29,29]];
  if(!(f>0)) return "rgb(240,240,240)"; f=Math.min(1,f)*(stops.length-1); const i=Math.min(stops.length-2,Math.floor(f)); const a=f-i;
  const c=stops[i].map((x,j)=>Math.round(x+(stops[i+1][j]-x)*a)); return "rgb("+c.join(",")+")";}
let cells=[];
function drawNodes(nd){
  const box=el("div"); cells=[];
  $("nodes-mode").textContent = nd.pilots.some(p=>p.mode==="now")?"(now)":nd.pilots.some(p=>p.mode==="mean")?
    "(mean over the run: placements per node are in tasks.msgpack only)":"";
  for(const p of nd.pilots){
    const n=p.names.length; const head=el("div",{class:"small"},p.uid+" · "+fmt(n)+" nodes");
    box.append(head);
    if(!n){box.append(none("nodes not known yet")); continue;}
    if(p.mode==="unknown"){box.append(none("placement per node: not in this session's events "+
      "(the agent does not record it); shown for a closed session from tasks.msgpack")); continue;}
    const row=el("div",{style:"display:flex;gap:16px;flex-wrap:wrap"});
    const avail=Math.max(260,((document.body.clientWidth||1200)-80)/2);
    const cols=Math.max(1,Math.ceil(Math.sqrt(n*2))); const size=Math.max(3,Math.min(28,Math.floor(avail/cols)));
    const rows=Math.ceil(n/cols); const lost=new Set(p.lost||[]);
    for(const what of ["cores","gpus"]){
      const cv=el("canvas",{width:cols*size,height:rows*size}); const g=cv.getContext("2d");
      const busy=what==="cores"?p.busy_cores:p.busy_gpus; const tot=what==="cores"?p.cores:p.gpus;
      for(let i=0;i<n;i++){const x=(i%cols)*size,y=Math.floor(i/cols)*size;
        g.fillStyle = lost.has(p.names[i])?"#000":(tot[i]>0?heat(busy[i]/tot[i]):"#fff");
        g.fillRect(x,y,size-(size>4?1:0),size-(size>4?1:0));
        if(!(tot[i]>0)&&size>4){g.strokeStyle="#ccc";g.strokeRect(x+.5,y+.5,size-2,size-2);}}
      cells.push({cv,p,cols,size,what}); cv.dataset.what=what;
      const used=busy.reduce((a,b)=>a+b,0), all=tot.reduce((a,b)=>a+b,0);
      row.append(el("div",{},el("div",{class:"small muted"},what+": "+fmt(Math.round(used))+" / "+fmt(all)+
        (all?" ("+(100*used/all).toFixed(1)+"%)":"")),cv));}
    box.append(row);}
  put("nodes", box);
  for(const c of cells){ c.cv.onmousemove=ev=>{const r=c.cv.getBoundingClientRect();
      const sx=c.cv.width/r.width; const i=Math.floor((ev.clientY-r.top)*sx/c.size)*c.cols+Math.floor((ev.clientX-r.left)*sx/c.size);
      const tip=$("tip"); if(i<0||i>=c.p.names.length){tip.style.display="none";return;}
      tip.textContent=c.p.names[i]+": "+c.p.busy_cores[i]+"/"+c.p.cores[i]+" cores, "+c.p.busy_gpus[i]+"/"+c.p.gpus[i]+" GPUs";
      tip.style.left=(ev.clientX+12)+"px"; tip.style.top=(ev.clientY+12)+"px"; tip.style.display="block";};
    c.cv.onmouseleave=()=>{$("tip").style.display="none";};}
}

function drawQueue(q){
  const d=el("div");
  d.append(el("div",{class:"small muted"},fmt(q.before_agent)+" tasks not yet at an agent"+
    (q.before_agent?" (oldest "+dur(q.before_agent_waited_s)+")":"")+" · "+fmt(q.placed_waiting_launch)+" placed, waiting for their launcher"));
  if(!q.groups.length) d.append(none("no task waits at an agent"));
  else d.append(table(["pilot","shape","tasks","waited","why"],
    q.groups.map(g=>[g.pilot||"?",g.shape+(g.calls?" (calls)":""),fmt(g.count),dur(g.waited_s),g.why]),[2,3]));
  put("queue", d);
}
function drawFailed(f){
  const d=el("div");
  d.append(el("div",{class:"small muted"},fmt(f.count)+" failed · "+fmt(f.canceled)+" canceled"));
  if(f.by_reason.length) d.append(table(["reason","tasks"],f.by_reason.map(r=>[r.reason||"(none given)",fmt(r.count)]),[1]));
  if(f.recent.length){d.append(el("div",{class:"small muted",style:"margin-top:6px"},"most recent"));
    d.append(table(["task","name","at","reason"],f.recent.slice(0,15).map(r=>[r.uid,r.name||"",dur(r.t),r.reason||""]),[2]));}
  put("failed", d);
}
function drawPilots(pp){
  const d=el("div"), al=Object.entries(pp.allocations||{});
  if(al.length) d.append(table(["allocation policy","requested","queued","running","ended","tasks waiting","now"],
    al.map(([u,a])=>[u,fmt(a.requested),fmt(a.queued),fmt(a.running),fmt(a.ended),fmt(a.waiting),a.paused?"paused: "+a.paused:(a.limit||"")]),[1,2,3,4,5]));
  if(!pp.pilots.length){d.append(none("no pilot yet"));put("pilots",d);return;}
  d.append(table(["pilot","state","nodes","cores in use","GPUs in use"],pp.pilots.map(p=>[p.uid+(p.resource?" ("+p.resource+")":""),p.state||"–",
    fmt(p.nodes),fmt(p.busy_cores)+" / "+fmt(p.cores),fmt(p.busy_gpus)+" / "+fmt(p.gpus)]),[2,3,4]));
  const parts=[]; for(const p of pp.pilots) for(const x of p.partitions) parts.push([p.uid,"p"+x.index,fmt(x.nodes),x.launcher||"",x.state+(x.why?": "+x.why:"")]);
  if(parts.length){d.append(el("div",{class:"small muted",style:"margin-top:6px"},"partitions"));d.append(table(["pilot","partition","nodes","launcher","state"],parts,[2]));}
  const ls=[]; for(const p of pp.pilots) for(const x of p.launchers) ls.push([p.uid,x.name,x.state+(x.detail?": "+x.detail:"")]);
  if(ls.length){d.append(el("div",{class:"small muted",style:"margin-top:6px"},"launchers"));d.append(table(["pilot","launcher","state"],ls));}
  const notes=[]; for(const p of pp.pilots) for(const x of p.notes) notes.push([p.uid,x.event,x.detail]);
  if(notes.length){d.append(el("div",{class:"small muted",style:"margin-top:6px"},"pilot events"));d.append(table(["pilot","event","detail"],notes.slice(-12)));}
  put("pilots", d);
}
function drawServices(s){
  if(!s.groups.length){put("services",none("no service group"));return;}
  const d=el("div");
  d.append(table(["pilot","group","epoch","view","target","members"],s.groups.map(g=>[g.pilot,g.name,g.epoch??"–",g.view??"–",g.target??"–",
    Object.entries(g.states).map(([k,v])=>v+" "+k).join(", ")]),[2,3,4]));
  for(const g of s.groups){ if(!g.members.length) continue;
    d.append(el("div",{class:"small muted",style:"margin-top:6px"},g.name+": members"));
    d.append(table(["member","state","endpoint / why"],g.members.map(m=>[m.uid,m.state||"–",m.endpoint||m.why||""])));}
  put("services", d);
}
function drawPools(p){
  if(!p.pools.length){put("pools",none("no function pool"));return;}
  const rows=[]; for(const x of p.pools) for(const what of ["workers","calls"]) if(x[what]){
    const c=x[what]; rows.push([x.pilot,what,fmt(c.queued+c.placed),fmt(c.running),fmt(c.done),fmt(c.failed),fmt(c.canceled)]);}
  put("pools", table(["pilot","","waiting","running","done","failed","canceled"],rows,[2,3,4,5,6]));
}

const PARTS=["summary","timeline","nodes","queue","failed","pilots","services","pools"];
const DRAW={summary:drawStates,timeline:drawTimeline,nodes:drawNodes,queue:drawQueue,failed:drawFailed,
  pilots:drawPilots,services:drawServices,pools:drawPools};
let refreshes=0;
async function poll(){
  try{
    const got=await Promise.all(PARTS.map(p=>fetch("/api/"+p+Q,{cache:"no-store"}).then(r=>{
      if(!r.ok) throw new Error("/api/"+p+": HTTP "+r.status); return r.json();})));
    PARTS.forEach((p,i)=>DRAW[p](got[i]));
    refreshes++; document.body.dataset.refreshes=String(refreshes);
    document.body.dataset.states=JSON.stringify(got[0].states);
    document.body.dataset.live=String(got[0].live);
  }catch(e){const b=$("badge"); b.textContent="error: "+e.message; b.className="badge err";}
  setTimeout(poll, 1000);
}
poll();
</script></body></html>
"""
