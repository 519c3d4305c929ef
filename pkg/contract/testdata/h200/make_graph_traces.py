# Made the graph/ traces on an NVIDIA H200 (torch 2.11, transformers 5.17):
#   python3 make_graph_traces.py OUT graph 6 16 4     (OUT VARIANT LAYERS EXPERTS TOP_K)
# make_h200_traces.py of the shared traces, compacted: the same model and
# steps, but the decode step (execute_context_0(0)_generation_64(64)) is
# always replayed from a CUDA graph captured before profiling (whatever
# VARIANT says; "fullgraph" replays every step); worker names rank0_VARIANT_wN.
import os,sys,time,torch
from torch.profiler import profile,schedule,ProfilerActivity,tensorboard_trace_handler,record_function
from transformers import Qwen3MoeConfig,Qwen3MoeForCausalLM
out=sys.argv[1];v=sys.argv[2]
torch.manual_seed(0)
c=Qwen3MoeConfig(vocab_size=32000,hidden_size=1024,intermediate_size=2048,moe_intermediate_size=512,num_hidden_layers=int(sys.argv[3]),num_attention_heads=16,num_key_value_heads=4,head_dim=64,num_experts=int(sys.argv[4]),num_experts_per_tok=int(sys.argv[5]),max_position_embeddings=8192)
c._attn_implementation="sdpa"
m=Qwen3MoeForCausalLM(c).to(device="cuda",dtype=torch.bfloat16).eval()
R=lambda *s:torch.randint(0,32000,s,device="cuda")
def si(i):
 k=i%3
 if k==0:return("p",R(4,256),4,1024,0,0)
 if k==1:return("d",R(64,1),0,0,64,64)
 return("m",R(8,64),2,256,6,6)
st=R(64,1);s=torch.cuda.Stream();s.wait_stream(torch.cuda.current_stream())
with torch.no_grad(),torch.cuda.stream(s):
 for _ in range(3):m(st,use_cache=False)
torch.cuda.current_stream().wait_stream(s)
g=torch.cuda.CUDAGraph()
with torch.no_grad(),torch.cuda.graph(g):m(st,use_cache=False)
with torch.no_grad():
 for _ in range(3):m(R(4,256),use_cache=False)
torch.cuda.synchronize()
for w in range(2):
 with profile(activities=[ProfilerActivity.CPU,ProfilerActivity.CUDA],schedule=schedule(wait=0,warmup=2,active=8),on_trace_ready=tensorboard_trace_handler(out,worker_name=f"rank0_{v}_w{w}",use_gzip=True),record_shapes=True,with_stack=True) as p:
  for i in range(10):
   k,ids,nc,ct,ng,gt=si(i)
   with torch.no_grad(),record_function(f"execute_context_{nc}({ct})_generation_{ng}({gt})"):
    if k=="d" or v=="fullgraph":g.replay()
    else:m(ids,use_cache=False)
   torch.cuda.synchronize();p.step()
 time.sleep(0.5)
