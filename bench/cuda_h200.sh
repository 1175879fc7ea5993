#!/bin/bash
# bench/cuda_h200.sh — run on the GPU machine from the repository root: Gemma 3 270M, ember CUDA vs
# llama.cpp CUDA (same GGUF, same run). Expects ember binaries in /root/cg (E), the model in
# /root/models (joined from gpart.*), llama.cpp built with -DGGML_CUDA=ON -DCMAKE_CUDA_ARCHITECTURES=90
# in /root/llama.cpp/build (L), and $OUT for logs. STAGES="bench par check ppl serve ncu" picks parts.
# How it was run on the lent H200: bench/results/cuda-h200.md.
export LD_LIBRARY_PATH=/root/cg:/usr/local/cuda/lib64:$LD_LIBRARY_PATH
M=/root/models/g.gguf; L=/root/llama.cpp/build/bin; E=/root/cg
[ -f $M ] || cat /root/models/gpart.* > $M
md5sum $M | cut -c1-32; cut -c1-32 $E/model.md5
for i in $(seq 1 200); do [ -f /root/lbuild.done ] && break; sleep 2; done; echo "llama build rc $(cat /root/lbuild.done 2>/dev/null)"
s() { echo "=== $*"; }
STAGES=${STAGES:-bench par check ppl serve}
for st in $STAGES; do case $st in
bench)
 s ember tg/pp default; timeout 120 $E/ember bench -m $M -ngl 99 -p 512 -n 256 -r 5 2>&1 | grep gemma3 | tee $OUT/bench.txt
 s llama tg/pp; timeout 120 $L/llama-bench -m $M -ngl 99 -p 512 -n 256 -r 5 2>&1 | grep gemma3 | tee -a $OUT/bench.txt
 s ember PDL=0; EMBER_CUDA_PDL=0 timeout 60 $E/ember bench -m $M -ngl 99 -p 0 -n 256 -r 3 2>&1 | grep gemma3 | tee -a $OUT/bench.txt
 s ember FUSE=0; EMBER_CUDA_FUSE=0 timeout 60 $E/ember bench -m $M -ngl 99 -p 0 -n 256 -r 3 2>&1 | grep gemma3 | tee -a $OUT/bench.txt
 s ember GRAPHS=0; EMBER_CUDA_GRAPHS=0 timeout 60 $E/ember bench -m $M -ngl 99 -p 0 -n 256 -r 3 2>&1 | grep gemma3 | tee -a $OUT/bench.txt
 s ember TF32 pp512/pp3000; EMBER_CUDA_TF32=1 timeout 60 $E/ember bench -m $M -ngl 99 -p 512 -n 0 -r 5 2>&1 | grep gemma3 | tee -a $OUT/bench.txt
 EMBER_CUDA_TF32=1 timeout 60 $E/ember bench -m $M -ngl 99 -p 3000 -n 0 -r 3 2>&1 | grep gemma3 | tee -a $OUT/bench.txt
 s pp3000; timeout 60 $E/ember bench -m $M -ngl 99 -p 3000 -n 0 -r 3 2>&1 | grep gemma3 | tee -a $OUT/bench.txt
 timeout 60 $L/llama-bench -m $M -ngl 99 -p 3000 -n 0 -r 3 2>&1 | grep gemma3 | tee -a $OUT/bench.txt ;;
par)
 s par8; timeout 120 $E/par_decode $M -np 8 -pp 128 -tg 128 -r 3 2>&1 | tee $OUT/par.txt
 timeout 120 $L/llama-batched-bench -m $M -ngl 99 -c 4096 -b 2048 -ub 512 -npp 128 -ntg 128 -npl 1,8 2>&1 | grep "^|" | tee -a $OUT/par.txt ;;
check)
 s cuda_check; timeout 240 $E/cuda_check $M -g tests/golden/runtime/gemma3-270m.json > $OUT/cuda_check.txt 2>&1; tail -4 $OUT/cuda_check.txt
 s verify; EMBER_CUDA_VERIFY=1 timeout 120 $E/cuda_check $M -g tests/golden/runtime/gemma3-270m.json -p 2 -n 2 > $OUT/verify.txt 2>&1; grep -v "^  \|^prompt" $OUT/verify.txt | cut -c1-400 | tail -12
 s cuda_check TF32; EMBER_CUDA_TF32=1 timeout 240 $E/cuda_check $M -g tests/golden/runtime/gemma3-270m.json > $OUT/cuda_check_tf32.txt 2>&1; tail -4 $OUT/cuda_check_tf32.txt ;;
ppl)
 s ppl; for g in 0 99; do timeout 120 $E/ember perplexity -m $M -f tests/data/pride_prejudice.txt -c 512 --chunks 16 -ngl $g 2>&1 | tail -1; done | tee $OUT/ppl.txt
 EMBER_CUDA_TF32=1 timeout 120 $E/ember perplexity -m $M -f tests/data/pride_prejudice.txt -c 512 --chunks 16 -ngl 99 2>&1 | tail -1 | tee -a $OUT/ppl.txt ;;
serve)
 s serve8; timeout 150 python3 bench/serve_bench.py --model $M --only ember --ember $E/ember --streams 1,8 --max-tokens 128 --parallel 8 --out $OUT/serve.md > $OUT/serve.log 2>&1; tail -5 $OUT/serve.md; tail -3 $OUT/serve.log ;;
ncu)
 s ncu; EMBER_CUDA_GRAPHS=0 timeout 200 ncu --clock-control none --cache-control none --metrics gpu__time_duration.sum --launch-skip 3000 --launch-count 1000 --print-summary per-kernel --csv $E/ember bench -m $M -ngl 99 -p 0 -n 64 -r 1 > $OUT/ncu_ember.csv 2>&1
 timeout 200 ncu --clock-control none --cache-control none --metrics gpu__time_duration.sum --launch-skip 3000 --launch-count 1000 --print-summary per-kernel --csv $L/llama-bench -m $M -ngl 99 -p 0 -n 64 -r 1 > $OUT/ncu_llama.csv 2>&1; echo ncu done ;;
esac; done
