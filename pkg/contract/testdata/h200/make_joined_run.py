import os,sys,time,json,datetime,torch
from torch.profiler import profile,schedule,ProfilerActivity,tensorboard_trace_handler,record_function
from transformers import Qwen3MoeConfig,Qwen3MoeForCausalLM
out=sys.argv[1];os.makedirs(out,exist_ok=True)
torch.manual_seed(0)
c=Qwen3MoeConfig(vocab_size=32000,hidden_size=1024,intermediate_size=2048,moe_intermediate_size=512,num_hidden_layers=6,num_attention_heads=16,num_key_value_heads=4,head_dim=64,num_experts=16,num_experts_per_tok=4,max_position_embeddings=8192)
c._attn_implementation="sdpa"
m=Qwen3MoeForCausalLM(c).to(device="cuda",dtype=torch.bfloat16).eval()
S=[(4,256,0,0),(0,0,64,1),(2,128,6,1)]
L=open(out+"/layer1.jsonl","w");P=open(out+"/phases.jsonl","w");n=[0]
def ph(name,i):
 w=time.time_ns();mo=time.monotonic_ns()
 t=datetime.datetime.fromtimestamp(w//10**9,datetime.timezone.utc).strftime("%Y-%m-%dT%H:%M:%S")+".%09dZ"%(w%10**9)
 P.write(json.dumps({"phase":name,"t":t,"mono_ns":mo,"index":i})+"\n");P.flush()
def step(p=None):
 k=n[0]%3;a,b,g,h=S[k];ids=torch.randint(0,32000,(a or g,b or h),device="cuda")
 sub=time.monotonic_ns()
 with torch.no_grad(),record_function(f"execute_context_{a}({a*b})_generation_{g}({g*h})"):m(ids,use_cache=False)
 torch.cuda.synchronize()
 L.write(json.dumps({"schema":1,"step":n[0],"submit_mono_ns":sub,"complete_mono_ns":time.monotonic_ns(),"model_executed":True,"num_prefill_reqs":a,"prefill_tokens":a*b,"num_decode_reqs":g,"decode_tokens":g*h,"runtime_mode":"NONE"})+"\n")
 n[0]+=1
 if p:p.step()
with torch.no_grad():
 for _ in range(3):m(torch.randint(0,32000,(4,256),device="cuda"),use_cache=False)
torch.cuda.synchronize()
ph("warmup",0)
for _ in range(6):step()
ph("clean",3)
for _ in range(60):step()
for w in range(2):
 ph("profile",w+1)
 with profile(activities=[ProfilerActivity.CPU,ProfilerActivity.CUDA],schedule=schedule(wait=0,warmup=2,active=8),on_trace_ready=tensorboard_trace_handler(out+"/traces",worker_name=f"rank0_w{w}",use_gzip=True),record_shapes=True,with_stack=True) as p:
  for i in range(10):step(p)
 ph("recovery",w+1)
 for _ in range(10):step()
ph("done",0);L.close();P.close()
print(open(out+"/phases.jsonl").read())
