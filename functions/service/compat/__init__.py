"""The neighbours' APIs and documents, accepted as they are and mapped onto ordinary jobs: OME's `trainer` block
(`ome.py`, seeds/002), DeepFinery's POST /train (`deepfinery.py`, seeds/004), Fireworks' training shapes
(`shapes.py`, seeds/003)."""
